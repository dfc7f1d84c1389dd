"""The facets of a person's life a fact is about, whatever its wording: where they live, their work, their
partner, their phone number... in English and Chinese.

The conflict rules use them where a fact's slot pattern (domain/facts.py) does not read its wording: "I'm
single" and "got engaged to Marcus last month" share no word and no slot pattern, yet both are about the
relationship facet, and the second says that something changed. A facet is recognised by its vocabulary
(the words people use about it), so a new wording of an old update still lands on it.

Two kinds of facet:
- single-valued (`alone=True`): a person has one of it at a time (one home, one employer, one phone
  number, one relationship status). A fact worded as a change of the same facet of the same people is an
  update of it, even when the two share no other word.
- many-valued (`alone=False`): drinks, sports, pets, meetings. A change there replaces only what it
  names, so the two facts must also share a content term ("stopped running, I swim now" replaces "runs
  5 km every evening"; "started drinking coffee" does not replace "likes green tea").

Some facets have people as their value: a partner, a manager, an emergency contact. There the relation
words ("wife", "老婆", "manager") say what the value is, not whose fact it is (`value_relations`).
Relationship words are states (single, dating, engaged, married): one replaces another, the same one said
again changes nothing. A favourite is a facet per kind of thing ("favourite:band", `FAVOURITE`), matching
domain/facts.py's slot of the same name.

Every pattern is an alternation of literals (no nested repetition) over at most MAX_FACT_CHARS
characters: linear in the text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from hindsight_server.domain.facts import MAX_FACT_CHARS, fold
from hindsight_server.domain.language import CHINESE, language
from hindsight_server.domain.lexical import ENGLISH_STOPWORDS
from hindsight_server.domain.numerals import EN_NUMBER

__all__ = ["FACETS", "FAVOURITE", "Facet", "FacetWords", "facet_named", "facets", "quantity_holder"]

FacetWords = Mapping[str, frozenset[str]]  # facet name -> the words of it a text uses, case folded

_ANY_RELATION = frozenset({"*"})


@dataclass(frozen=True, slots=True)
class Facet:
    name: str
    english: re.Pattern[str]
    chinese: re.Pattern[str]
    alone: bool = True  # single-valued: sharing the facet is enough (see the module's docstring)
    # Its words name its values (colours, brands, languages): other words, another value.
    valued: bool = False
    # Its words are states one replaces another of (single, engaged, married): the same state said again
    # is no change, whatever the cue ("已婚" and "已经结婚了").
    states: bool = False
    # Relation words that are the facet's value, not its holder ("*": every relation word).
    value_relations: frozenset[str] = frozenset()
    # The slots of domain/facts.py that are this facet ("employer" and "job" are the work facet): a fact
    # filed under such a slot is found by a later fact of the facet that fills no slot.
    slots: tuple[str, ...] = ()
    # Facets that also need this to match (the language of replies needs a word about replies).
    english_also: re.Pattern[str] | None = None
    chinese_also: re.Pattern[str] | None = None
    # Kinds of the facet a person holds one of each (a dentist and a cardiologist, car and home
    # insurance): its words that name a kind, each to its kind. Two facts naming different kinds are
    # two things; one that names none may be about either.
    kinds: Mapping[str, str] = field(default_factory=dict)
    # Values that cannot hold together ("short" and "long" replies): a fact that says the other one
    # replaces the earlier, with or without a change word.
    opposites: frozenset[frozenset[str]] = frozenset()
    # A quantity of the person measured again and again (their weight, blood pressure, a lab value): a
    # new number is the latest reading, which replaces the earlier one, with or without a change word
    # ("I weigh 82 kg", "79.5 on the scale this morning").
    readings: bool = False
    # Its words that are only units of its measure: a price per kilo or a fish of 6 斤 is not a weight.
    units: frozenset[str] = frozenset()

    def ignores(self, relation: str) -> bool:
        return self.value_relations == _ANY_RELATION or relation in self.value_relations

    def contradicts(self, now: frozenset[str], before: frozenset[str]) -> bool:
        """Whether `now` says the opposite of `before` and not both (a reply "short" then "long"; "not
        long, short" says both and is left alone)."""
        return any(
            len(pair & before) == 1 and len(pair & now) == 1 and pair & now != pair & before
            for pair in self.opposites
        )

    def kinds_of(self, words: frozenset[str]) -> frozenset[str]:
        """The kinds of the facet these of its words name (none: the words name no kind)."""
        return frozenset(self.kinds[word] for word in words if word in self.kinds)


def _en(words: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{words})\b", re.IGNORECASE)


def _zh(words: str) -> re.Pattern[str]:
    return re.compile(words, re.IGNORECASE)


_JOBS_EN = (
    "engineer|developer|programmer|analyst|designer|teacher|nurse|doctor|lawyer|accountant|barista|"
    "consultant|director|cashier|chef|scientist|researcher|salesperson|architect|pharmacist|professor|"
    "intern|freelancer|contractor|founder|cto|ceo|vp"
)
_JOBS_ZH = (
    "工程师|经理|会计|老师|教师|护士|医生|律师|程序员|设计师|销售|运营|产品|总监|主管|实习|创业|外企|国企|"
    "公务员|开了家|开了个|打工|种地|务农|做生意"
)
_LANGUAGES_EN = (
    "english|spanish|german|french|chinese|mandarin|cantonese|japanese|korean|portuguese|italian|russian|"
    "arabic|hindi|dutch"
)
_LANGUAGES_ZH = "中文|英文|英语|日语|日文|韩语|韩文|德语|法语|西班牙语|粤语|普通话"


def _word(word: str) -> str:
    """One spelling of a facet's word: "running", "runs" and "run" are "run"; "colour" is "color"."""
    return _SPELLING[word] if word in _SPELLING else fold(word)


# One word per value, so that a synonym is not read as another value ("简洁" and "简短" are one).
_SPELLING = {
    "colour": "color", "colours": "color", "colors": "color", "grey": "gray",
    "concise": "short", "brief": "short", "简洁": "short", "简短": "short", "短一点": "short",
    "detailed": "long", "lengthy": "long", "verbose": "long", "详细": "long", "长一点": "long",
    "啰嗦": "long", "longer": "long", "shorter": "short", "keyboard": "piano", "电子琴": "钢琴",
    "bulleted": "bullet", "bullets": "bullet", "bullet points": "bullet", "informal": "casual",
    "正式": "formal", "随意": "casual", "coffees": "coffee", "latte": "coffee", "lattes": "coffee",
    "americano": "coffee", "espresso": "coffee", "cappuccino": "coffee", "decaf": "coffee",
    "拿铁": "咖啡", "美式": "咖啡", "teas": "tea", "英文": "english", "英语": "english",
    "中文": "chinese", "普通话": "chinese",
    "mandarin": "chinese", "日语": "japanese", "日文": "japanese", "韩语": "korean", "韩文": "korean",
    "德语": "german", "法语": "french", "西班牙语": "spanish", "粤语": "cantonese", "毫克": "mg",
    # relationship states (each also spelled as itself: "married" is not folded to "marri")
    "married": "married", "engaged": "engaged", "dating": "dating", "divorced": "divorced",
    "单身": "single", "一个人过": "single", "单着": "single", "未婚": "single", "split up": "single",
    "broke up": "single", "分手": "single", "分了": "single", "separated": "single", "相亲": "single",
    "marry": "married", "marriage": "married", "wedding": "married", "wife": "married",
    "husband": "married", "spouse": "married", "结婚": "married", "已婚": "married", "领证": "married",
    "老公": "married", "老婆": "married", "妻子": "married", "丈夫": "married", "engagement": "engaged",
    "fiance": "engaged", "fiancee": "engaged", "fiancé": "engaged", "fiancée": "engaged",
    "订婚": "engaged", "girlfriend": "dating", "boyfriend": "dating", "partner": "dating",
    "恋爱": "dating", "对象": "dating", "男朋友": "dating", "女朋友": "dating", "男友": "dating",
    "女友": "dating", "脱单": "dating", "divorce": "divorced", "离婚": "divorced", "relationship": "",
}  # fmt: skip


def _words(kinds: Mapping[str, str]) -> str:
    """The alternation of every word of a kinds table ({kind: "word|word"})."""
    return "|".join(kinds.values())


def _kinds(*tables: Mapping[str, str]) -> dict[str, str]:
    """{kind: "word|word"} tables -> {each word as `facets` spells it (_word): its kind}. The words are
    literals (no pattern), so that a match is looked up as it is."""
    return {
        _word(word.casefold()): kind
        for table in tables
        for kind, words in table.items()
        for word in words.split("|")
    }


# Kinds a person holds one of each: a dentist and a cardiologist are two doctors.
_CARE_EN = {
    "general": "gp|family doctor|primary care|physician",
    "dental": "dentist|orthodontist|dental",
    "heart": "cardiologist|heart|cardiac",
    "skin": "dermatologist|skin",
    "eyes": "optometrist|optician|ophthalmologist|eye doctor",
    "mind": "therapist|psychiatrist|psychologist|counsellor|counselor|therapy",
    "children": "pediatrician|paediatrician",
    "body": "physio|physiotherapist|chiropractor",
    "pet": "vet|veterinarian",
    "bones": "orthopedist|orthopaedist|orthopedic surgeon|orthopaedic surgeon|knee surgeon|hip surgeon",
    "hormones": "endocrinologist|endo|diabetes doctor",
}
_CARE_ZH = {
    "dental": "牙医|牙科|看牙",
    "heart": "心内科|心脏|心血管",
    "skin": "皮肤科",
    "eyes": "眼科",
    "mind": "心理咨询师|心理医生",
    "children": "儿科",
    "general": "家庭医生|全科",
    "pet": "兽医|宠物医院",
    "bones": "骨科",
    "hormones": "内分泌科|内分泌",
}
_INSURANCE_EN = {
    "car": "car|auto|motor",
    "home": "home|buildings|contents|renters|house",
    "health": "health|medical|dental",
    "life": "life",
    "travel": "travel",
    "pet": "pet",
}
_INSURANCE_ZH = {
    "car": "车险|交强险|商业险",
    "health": "医疗险|健康险|医保",
    "life": "寿险|重疾险|人寿",
    "home": "房屋险|家财险",
    "travel": "旅行险",
    "accident": "意外险",
    "social": "社保",
}
# The words that make a fact one of insurance or of a utility; a kind's word alone ("car", "gas") does not.
_INSURANCE_WORDS = r"insurance|insurer|insured|coverage|policy|cover|renewal|premium"
_UTILITY_WORDS = r"energy|supplier|power supply|utility|utilities|provider|bill|bills|tariff|company"
_UTILITY_EN = {"power": "electricity|electric|power", "gas": "gas", "water": "water"}
_UTILITY_ZH = {"power": "电费|供电|电力", "gas": "燃气|煤气|天然气", "water": "水费|自来水"}
# A runtime's versions: Node 16 -> 20 is one setting, Python's another.
_RUNTIMES = {
    "node": "node|node.js|nodejs",
    "python": "python",
    "java": "java|jdk",
    "go": "golang",
    "ruby": "ruby",
    "php": "php",
    "rust": "rust|rustc",
    "dotnet": ".net|dotnet",
    "postgres": "postgres|postgresql",
    "react": "react",
    "kubernetes": "kubernetes|k8s",
}
# A reply's length, layout and tone are three settings: "keep it short" and "use bullet points" both hold.
_STYLE_EN = {
    "length": "concise|short|shorter|brief|detailed|long|longer|lengthy|verbose|in depth|in-depth",
    "layout": "bullet|bullets|bulleted|paragraphs|paragraph|paragraph-style|prose|table|tables|numbered",
    "tone": "formal|casual|informal|friendly|professional|chatty",
}
_STYLE_ZH = {
    "length": "简洁|简短|详细|长一点|短一点|长篇|啰嗦|那么长|太长|重点",
    "layout": "表格|分点|要点|列表|段落",
    "tone": "正式|随意|官方|口语",
}
_DEVICE_EN = {
    "phone": "iphone|android|pixel|galaxy|smartphone|samsung|oneplus|huawei|xiaomi|motorola",
    "computer": "macbook|thinkpad|chromebook|laptop|imac",
    "tablet": "ipad|tablet|kindle",
    "watch": "apple watch|smartwatch|fitbit|garmin",
}
_DEVICE_ZH = {
    "phone": "苹果手机|安卓|华为mate|小米手机|荣耀|三星|oppo|vivo|红米|一加|iphone|pixel",
    "computer": "笔记本|电脑|macbook|thinkpad|台式机",
    "tablet": "平板|ipad",
    "watch": "手表|手环",
}

FACETS: tuple[Facet, ...] = (
    Facet(
        "residence",
        _en(
            r"live[sd]?|living|apartment|flat|condo|house|lease|rent|rents|renting|neighbou?rhood|studio|"
            r"roommates?|flatmates?|dorm|landlord|mov(?:ed|ing|e) (?:out|in|into)|home city|hometown|"
            r"our (?:new |own )?place|keys to|relocat\w*|home base|based in|"
            r"moved to (?!(?:mon|tue|wed|thu|fri|"
            r"sat|sun|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|next|the|a|an|tomorrow)\w*\b)(?-i:[A-Z])\w*"
        ),
        _zh(
            r"住|搬家|搬出|搬回|搬来|租|公寓|房子|房东|定居|安家|落户|一居室|两居室|宿舍|室友|老家|常驻|"
            r"搬.{0,2}家|搬[到去](?![^，,。；;]{0,10}(?:园区|办公|公司|工位|写字楼|总部))"
        ),
        value_relations=frozenset({"roommate", "flatmate", "室友", "landlord", "房东"}),
        slots=("residence",),
    ),
    Facet(
        "address",
        _en(r"address|mail|mailing|shipping|deliver(?:y|ies)|p\.?o\.? box|zip code|postcode"),
        _zh(r"地址|收货|寄到|邮寄|快递|邮编"),
    ),
    Facet(
        "work",
        _en(
            rf"works?|working|worked|job|jobs|employ\w*|employer|hired|company|firm|career|promot\w*|"
            rf"position|role|title|resign\w*|laid off|fired|retire[sd]?|retiring|internship|startup|"
            rf"freelanc\w*|offer|nursing|teaching|department|dept|org|division|first day|joined|{_JOBS_EN}"
        ),
        _zh(
            rf"工作|上班|公司|单位|入职|离职|辞职|跳槽|职位|岗位|职务|升职|转岗|退休|评上|部门|报到|搬砖|组长|"
            rf"开发|前端|后端|全栈|测试|科室|调岗|调到|调去|"
            rf"(?:财务|审计|人事|行政|市场|销售|技术|研发|法务|采购|运营|客服|产品)部|{_JOBS_ZH}"
        ),
        slots=("employer", "job"),
    ),
    Facet(
        "commute",
        _en(r"commut\w*|train|subway|metro|bus|e-bike|bike to work|ride to work|drive to work|carpool"),
        _zh(r"通勤|地铁|公交|开车去公司|开车上班|骑车上班|打车上班|坐班车"),
        valued=True,
    ),
    Facet(
        "work_mode",
        _en(
            r"remote(?:ly)?|from home|wfh|in the office|in office|in-office|hybrid|commut\w*|"
            r"return to the office|"
            r"onsite|on-site|office days?"
        ),
        _zh(r"远程|居家办公|在家办公|坐班|通勤|回公司上班|wfh|到岗|线下办公|驻场"),
    ),
    Facet(
        "workplace",
        _en(r"office|offices|site|campus|building|floor|hq|headquarters|onsite|on-site|coworking|cowork\w*"),
        _zh(r"园区|办公室|办公楼|写字楼|工位|驻场|总部|办公(?!用品)"),
    ),
    Facet(
        "shift",
        _en(
            r"night shifts?|day shifts?|late shifts?|early shifts?|on (?:days|nights|lates|earlies)|rota|"
            r"rotation"
        ),
        _zh(r"夜班|白班|早班|中班|晚班|倒班|轮班|大夜"),
        valued=True,
    ),
    Facet(
        "pickup",
        _en(
            r"pick(?:ed|s)? up|pickup|pick-up|collected|collection|drop-?off|school run|aftercare|"
            r"after-school club"
        ),
        _zh(r"(?<=[点半分])接|去接|接送|接娃|接孩子|托管|放学"),
    ),
    Facet(
        "school",
        _en(
            r"school|university|college|student|study|studying|studies|studied|majors?|majoring|degree|"
            r"graduat\w*|semester|kindergarten|daycare|preschool|elementary|phd|master's|masters|"
            r"bachelor's|grade|campus|dissertation|thesis|postdoc|exams?|gmat|gre|sat|ielts|toefl|mba|"
            r"year [0-9]+|[0-9]+(?:st|nd|rd|th) grade"
        ),
        _zh(
            r"学校|大学|小学|初中|高中|中学|幼儿园|读研|研究生|硕士|博士|本科|专业|上学|读书|年级|毕业|就读|"
            r"考上|录取|转学|复旦|清华|北大|考研|考试|雅思|托福|备考|考公"
        ),
        slots=("school", "major"),
    ),
    Facet(
        "relationship",
        _en(
            r"single|married|marry|marriage|wedding|engaged|engagement|fianc[eé]e?|divorc\w*|dating|"
            r"girlfriend|boyfriend|partner|wife|husband|spouse|split up|broke up|separated|widow\w*|"
            r"relationship"
        ),
        _zh(
            r"单身|结婚|已婚|未婚|离婚|订婚|恋爱|对象|男朋友|女朋友|男友|女友|老公|老婆|妻子|丈夫|分手|分了|脱单|"
            r"相亲|领证|一个人过|单着"
        ),
        value_relations=frozenset({"partner", "spouse", "fiance", "fiancee", "未婚妻", "未婚夫"}),
        states=True,
        slots=("relation:spouse", "relation:partner"),
    ),
    Facet(
        "phone_number",
        _en(
            r"phone number|new number|my number|(?:his|her|their) number|mobile|cell|cellphone|tel|"
            r"old number|number is|reach (?:me|them|him|her)|phone(?=\s*[:#]|\s+(?:is|was)\s+\+?[0-9])"
        ),
        _zh(r"手机号|号码|电话|换号|携号|新号"),
        slots=("phone",),
    ),
    Facet(
        "email",
        _en(r"e-?mail|inbox|gmail|outlook|proton(?:mail)?"),
        _zh(r"邮箱|邮件|email"),
        slots=("email",),
    ),
    Facet(
        "handle",
        _en(r"username|user name|handle|wechat|telegram|whatsapp|discord|login|screen name"),
        _zh(r"微信号|用户名|账号名|昵称|微信|抖音号"),
        slots=("username",),
    ),
    Facet(
        "carrier",
        _en(
            r"carrier|phone plan|data plan|isp|isps|internet|broadband|fiber|verizon|t-mobile|"
            r"at&t|comcast|xfinity|vodafone|unlimited plan"
        ),
        _zh(r"套餐|运营商|中国移动|移动|联通|电信|宽带|携号转网|转网"),
        valued=True,
    ),
    Facet(
        "device",
        _en(_words(_DEVICE_EN)),
        _zh(rf"mate ?[0-9]+|手机型号|{_words(_DEVICE_ZH)}"),
        valued=True,
        kinds=_kinds(_DEVICE_EN, _DEVICE_ZH),
    ),
    Facet(
        "vehicle",
        _en(
            r"car|cars|drives|driving|drove|vehicle|suv|truck|pickup|sedan|motorbike|motorcycle|tesla|honda|"
            r"toyota|bmw|audi|ford|subaru|civic|corolla|prius|license plate"
        ),
        _zh(r"车|特斯拉|本田|丰田|宝马|奔驰|比亚迪|大众|思域|驾驶"),
        valued=True,
        slots=("vehicle",),
    ),
    Facet(
        "diet",
        _en(
            r"vegetarian|vegan|pescatarian|keto|meat|carnivore|omnivore|plant-based|halal|kosher|fish|chicken|"
            r"beef|pork|seafood|dairy|animal products"
        ),
        _zh(r"吃素|素食|纯素|全素|吃肉|荤|清真|生酮|吃鱼|海鲜|不吃肉"),
        valued=True,
        slots=("diet",),
    ),
    Facet("smoking", _en(r"smok\w*|cigarettes?|cigs|vape|vaping|nicotine"), _zh(r"烟|抽烟|戒烟|电子烟")),
    Facet("alcohol", _en(r"alcohol|drinking|sober|booze|drinker"), _zh(r"喝酒|戒酒|酒")),
    # A unit may follow its number without a space: "down to 55kg".
    Facet(
        "weight",
        _en(
            r"weigh|weighs|weighed|weight|on the scales?|(?:[0-9]+(?:\.[0-9]+)?\s?)?(?:kg|kilos?|pounds|lbs)"
        ),
        _zh(r"体重|公斤|斤|减肥|瘦了|胖了|称了|称重|上秤"),
        readings=True,
        units=frozenset({"kg", "kilo", "kilos", "pounds", "lbs", "公斤", "斤"}),
    ),
    Facet(
        "blood_pressure",
        _en(r"blood pressure|bp"),
        _zh(r"血压|高压|低压"),
        readings=True,
    ),
    Facet(
        "blood_sugar",
        _en(r"hba1c|a1c|blood sugar|blood glucose|glucose|fasting"),
        _zh(r"血糖|糖化血红蛋白|糖化|空腹|餐后|饭后"),
        readings=True,
        kinds=_kinds(
            {"hba1c": "hba1c|a1c", "fasting": "fasting", "after a meal": "after a meal"},
            {"hba1c": "糖化血红蛋白|糖化", "fasting": "空腹", "after a meal": "餐后|饭后"},
        ),
    ),
    Facet(
        "cholesterol",
        _en(r"ldl|hdl|cholesterol|triglycerides"),
        _zh(r"总胆固醇|胆固醇|低密度脂蛋白|高密度脂蛋白|血脂|甘油三酯|ldl|hdl"),
        readings=True,
        kinds=_kinds(
            {"ldl": "ldl", "hdl": "hdl", "triglycerides": "triglycerides"},
            {"ldl": "低密度脂蛋白|ldl", "hdl": "高密度脂蛋白|hdl", "triglycerides": "甘油三酯"},
        ),
    ),
    Facet(
        "lab_value",
        _en(r"uric acid|creatinine|egfr|tsh|ferritin|haemoglobin|hemoglobin|vitamin d|psa|inr"),
        _zh(r"尿酸|肌酐|血红蛋白|铁蛋白|维生素d|转氨酶"),
        readings=True,
        kinds=_kinds(
            {
                "uric": "uric acid",
                "kidney": "creatinine|egfr",
                "thyroid": "tsh",
                "iron": "ferritin",
                "blood": "haemoglobin|hemoglobin",
                "vitamin": "vitamin d",
                "prostate": "psa",
                "clotting": "inr",
            },
            {
                "uric": "尿酸",
                "kidney": "肌酐",
                "blood": "血红蛋白",
                "iron": "铁蛋白",
                "vitamin": "维生素d",
                "liver": "转氨酶",
            },
        ),
    ),
    Facet(
        "fitness",
        _en(r"resting heart rate|resting hr|rhr|vo2 ?max|ftp"),
        _zh(r"静息心率|最大摄氧量|vo2 ?max|ftp"),
        readings=True,
        kinds=_kinds(
            {"heart": "resting heart rate|resting hr|rhr", "aerobic": "vo2max|vo2 max", "power": "ftp"},
            {"heart": "静息心率", "aerobic": "最大摄氧量|vo2max|vo2 max", "power": "ftp"},
        ),
    ),
    Facet(
        "age",
        _en(rf"years old|year-old|age|aged|birthday|turn(?:ed|s) (?:[0-9]+|{EN_NUMBER})"),
        _zh(r"岁|年龄|生日"),
    ),
    Facet(
        "income",
        _en(r"salary|paid|pay|income|raise|wage|wages|earns?|earning|bonus|paycheck"),
        _zh(r"工资|薪水|月薪|年薪|时薪|收入|涨薪|加薪|底薪|薪资|待遇"),
    ),
    Facet(
        "sleep",
        _en(
            r"wakes?|woke|waking|get up|gets up|getting up|bed|bedtime|sleeps?|slept|asleep|night owl|"
            r"early bird|in bed|up at|lights out"
        ),
        _zh(r"起床|睡|作息|上床|熬夜|早起|夜猫子|醒"),
    ),
    Facet(
        "team",
        _en(r"fan|fans|supports?|supporter|rooting for|favou?rite team|season tickets?"),
        _zh(r"球队|主队|球迷|粉|支持"),
        valued=True,
    ),
    Facet(
        "colour",
        _en(r"colou?rs?|red|blue|green|purple|yellow|black|white|pink|orange|grey|gray|teal"),
        _zh(r"颜色|红色|蓝色|绿色|紫色|黄色|黑色|白色|粉色|橙色|灰色"),
        valued=True,
    ),
    Facet(
        "reply_language",
        _en(_LANGUAGES_EN),
        _zh(_LANGUAGES_ZH),
        english_also=_en(
            r"repl(?:y|ies)|respond\w*|responses?|answers?|answering|write to me|talk to me|"
            r"language"
        ),
        chinese_also=_zh(r"回复|回答|回我|跟我说|和我说|语言|交流"),
        valued=True,
    ),
    Facet(
        "reply_style",
        _en(rf"bullet points|tone|{_words(_STYLE_EN)}"),
        _zh(rf"长点|短点|{_words(_STYLE_ZH)}"),
        english_also=_en(
            r"repl(?:y|ies)|respond\w*|responses?|answers?|explanations?|messages?|sentences?|"
            r"keep it|words|format|write|writing|give me"
        ),
        chinese_also=_zh(r"回复|回答|解释|说话|讲|写|分析|篇幅|字数|格式|呈现"),
        valued=True,
        kinds=_kinds(_STYLE_EN, _STYLE_ZH),
        opposites=frozenset({frozenset({"short", "long"}), frozenset({"formal", "casual"})}),
    ),
    Facet(
        "name",
        _en(
            r"call me|called|preferred name|nickname|goes by|go by|be called|addressed as|address me as|"
            r"refer to me as"
        ),
        _zh(r"叫我|称呼|昵称|改名"),
    ),
    Facet(
        "timezone",
        _en(
            r"time ?zone|pst|pdt|est|edt|cst|cet|cest|gmt|bst|utc|jst|ist|aest|(?:eastern|central|mountain|"
            r"pacific|uk|british|london|paris|berlin|beijing|tokyo|sydney|singapore|local) time|us eastern|"
            r"us pacific|us central|(?-i:[A-Z][a-z]+) time|(?:america|europe|asia|africa|australia)/[a-z_]+"
        ),
        _zh(r"时区|[\u4e00-\u9fff]{2}时间|东八区|美东|美西|(?:america|europe|asia|africa|australia)/[a-z_]+"),
        valued=True,
    ),
    Facet(
        "manager",
        _en(r"boss|manager|supervisor|reports to|reporting to|report to|team lead|line manager"),
        _zh(r"领导|上司|老板|主管|直属|归.{0,3}管|汇报|带我|leader"),
        value_relations=_ANY_RELATION,
        slots=("relation:boss",),
    ),
    Facet(
        "advisor",
        _en(r"advisor|adviser|mentor|thesis chair"),
        _zh(r"导师|指导老师|带教|师父"),
        value_relations=_ANY_RELATION,
    ),
    Facet(
        "emergency_contact",
        _en(r"emergency contact"),
        _zh(r"紧急联系人"),
        value_relations=_ANY_RELATION,
    ),
    Facet(
        "care",
        _en(rf"dentists|doctor|doctors|sees dr|see dr|seeing dr|{_words(_CARE_EN)}"),
        _zh(rf"医生|大夫|主治|{_words(_CARE_ZH)}"),
        value_relations=frozenset({"doctor", "dentist"}),
        kinds=_kinds(_CARE_EN, _CARE_ZH),
    ),
    Facet(
        "insurance",
        _en(rf"{_INSURANCE_WORDS}|{_words(_INSURANCE_EN)}"),
        _zh(rf"保险|续保|投保|保单|保费|保额|{_words(_INSURANCE_ZH)}"),
        english_also=_en(_INSURANCE_WORDS),
        kinds=_kinds(_INSURANCE_EN, _INSURANCE_ZH),
    ),
    Facet(
        "utility",
        _en(rf"energy|power supply|{_words(_UTILITY_EN)}"),
        _zh(_words(_UTILITY_ZH)),
        english_also=_en(_UTILITY_WORDS),
        kinds=_kinds(_UTILITY_EN, _UTILITY_ZH),
    ),
    Facet(
        "loyalty",
        _en(
            r"status|tier|elite|gold|silver|platinum|diamond|premier|frequent flyer|mileageplus|"
            r"executive club|"
            r"skymiles|aadvantage|avios|bonvoy"
        ),
        _zh(r"会员等级|金卡|银卡|白金|钻石|常旅客|里程"),
        valued=True,
    ),
    Facet(
        "work_team",
        _en(r"team:|(?:on|in|joined|to|into) the [\w-]+(?: [\w-]+)? (?:team|squad|org)"),
        _zh(r"团队：|所在团队|项目组|[\u4e00-\u9fff]{2}组(?=[，。；,;]|$)"),
    ),
    Facet(
        "delivery",
        _en(
            r"food delivery|takeout app|delivery app|uber eats|doordash|deliveroo|grubhub|just eat|instacart"
        ),
        _zh(r"外卖|饿了么|美团外卖"),
        valued=True,
    ),
    Facet(
        "font",
        _en(r"font|font size|[0-9]+-point|[0-9]+ ?pt|large print"),
        _zh(r"字号|字体|大字|[0-9]+号字"),
    ),
    Facet(
        "visa",
        _en(r"visa|f-1|h-1b|j-1|opt|green card|work permit|residence permit|permanent resident"),
        _zh(r"签证|绿卡|工签|居留|f-1|h-1b"),
        english_also=_en(r"status|visa|f-1|h-1b|green card|permit|resident|on (?:an? )?[a-z0-9-]+"),
        alone=False,  # one may hold several (a US visa and a Schengen one)
    ),
    Facet(
        "seat",
        _en(r"aisle|window seats?|middle seat|exit row|seat|seats|seating"),
        _zh(r"座位|靠窗|靠过道|过道|中间座|选座"),
        valued=True,
    ),
    Facet(
        "gym",
        _en(
            r"gym|gyms|fitness club|health club|leisure centre|leisure center|train(?:s|ing)? at|"
            r"work(?:s|ing)? out at"
        ),
        _zh(r"健身房|健身卡|年卡|团课|私教|健身中心"),
    ),
    Facet(
        "notes_tool",
        _en(
            r"notes?|note-taking|to-?dos?|todo list|todo app|tasks|task manager|notion|evernote|obsidian|"
            r"onenote|apple notes|logseq|roam|todoist|things 3|ticktick"
        ),
        _zh(r"笔记|纪要|备忘|待办|印象笔记|飞书文档|语雀|石墨|notion"),
        valued=True,
    ),
    Facet(
        "bank",
        _en(
            r"bank|banks|banking|checking account|savings account|chequing|current account|joint account|"
            r"credit union|chase|wells fargo|citibank|hsbc|barclays|santander|rbc|td"
        ),
        _zh(r"银行|开户|储蓄卡|银行卡|农行|工行|建行|中行|招行|交行|邮储|浦发|中信|民生|兴业|光大"),
        valued=True,
        slots=("bank",),
    ),
    Facet(
        "editor",
        _en(
            r"ide|editor|vs ?code|vscode|visual studio|vim|neovim|emacs|intellij|pycharm|webstorm|sublime|"
            r"cursor|jetbrains|xcode|zed"
        ),
        _zh(r"编辑器|ide|vs ?code|vim|neovim|emacs|intellij|pycharm|cursor|jetbrains"),
        valued=True,
    ),
    Facet(
        "cloud",
        _en(
            r"aws|gcp|google cloud|azure|cloud provider|digitalocean|heroku|vercel|netlify|cloudflare|on-prem"
        ),
        _zh(r"aws|gcp|azure|阿里云|腾讯云|华为云|云服务|云厂商|私有云|机房"),
        valued=True,
    ),
    Facet(
        "ci",
        _en(r"ci|ci/cd|jenkins|github actions|gitlab ci|circleci|travis|buildkite|pipelines?|teamcity|drone"),
        _zh(r"ci|ci/cd|jenkins|github actions|gitlab ci|流水线|持续集成"),
        valued=True,
    ),
    Facet(
        "operating_system",
        _en(r"macos|mac os|windows|linux|ubuntu|fedora|debian|arch linux|operating system|wsl"),
        _zh(r"macos|windows|linux|ubuntu|操作系统|系统"),
        english_also=_en(r"os|laptop|machine|computer|desktop|runs?|using|uses|daily driver|switched|moved"),
        valued=True,
    ),
    Facet(
        "runtime",
        _en(rf"{_words(_RUNTIMES)}"),
        _zh(rf"{_words(_RUNTIMES)}"),
        english_also=_en(r"version|versions|upgrad\w*|downgrad\w*|lts|runtime|v?[0-9]+(?:\.[0-9]+)*"),
        chinese_also=_zh(r"版本|升级|降级|lts|[0-9]+"),
        kinds=_kinds(_RUNTIMES),
    ),
    # Many-valued: a change replaces only what it names (a shared content term is also needed).
    Facet(
        "supplier",
        _en(
            r"suppliers?|vendors?|sourced from|comes? from|gets? (?:its|their|our|my) [\w -]{1,20} from|"
            r"buys? (?:[\w-]+ ){0,3}from|orders? (?:[\w-]+ ){0,3}from"
        ),
        _zh(r"供货商|供应商|进货|货源|从.{1,10}进货"),
        alone=False,
    ),
    Facet(
        "deadline",
        _en(
            r"deadline|due|due date|extension|launch|launches|go-live|go live|ship date|release date|ddl|"
            r"cutoff|cut-off"
        ),
        _zh(r"截止|上线|交付|发布|ddl|交稿|提交|deadline|到期"),
        alone=False,
    ),
    Facet(
        "owner",
        _en(
            r"owner|owns|owned|in charge|responsible for|handles|handling|point of contact|poc|leads|lead on"
        ),
        _zh(r"负责|对接|owner|接手|牵头|主导"),
        alone=False,
    ),
    Facet(
        "drink",
        _en(r"coffees?|teas?|lattes?|espresso|americano|decaf|matcha|cappuccino|soda|caffeine"),
        _zh(r"咖啡|茶|拿铁|美式|奶茶|可乐"),
        alone=False,
    ),
    Facet(
        "exercise",
        _en(
            r"gym|gyms|run|runs|running|jog\w*|swim\w*|yoga|pilates|cycling|bike|workouts?|work out|"
            r"works out|exercis\w*|marathon|crossfit|lifting|climbing|tennis|hiking|golf|badminton|football|"
            r"basketball|soccer"
        ),
        _zh(r"健身|跑步|游泳|瑜伽|骑行|锻炼|运动|年卡|爬山|网球|羽毛球|高尔夫|篮球|足球"),
        alone=False,
    ),
    Facet(
        "music",
        _en(r"music|genre|jazz|rock|pop|k-pop|hip-hop|rap|classical|band|singer"),
        _zh(r"音乐|歌|乐队|歌手|爵士|摇滚|流行"),
        alone=False,
    ),
    Facet(
        "pet",
        _en(
            r"pets?|dogs?|cats?|puppy|kitten|hamster|parrot|rabbit|retriever|labrador|poodle|beagle|terrier|"
            r"spaniel|husky|corgi|bulldog|dachshund|tabby"
        ),
        _zh(r"宠物|狗|猫|金毛|泰迪|柯基|仓鼠|兔子"),
        alone=False,
    ),
    Facet(
        "schedule",
        _en(
            r"meeting|meetings|sync|standup|stand-up|1:1|one-on-one|class|classes|lesson|lessons|"
            r"appointment|session|practice|training|shift|rehearsal|dinner|lunch"
        ),
        _zh(r"会议|例会|周会|晨会|课|训练|排练|门诊|复诊|值班|面试|饭局|聚餐|开饭|晚饭|午饭|早饭|理疗"),
        alone=False,
    ),
    Facet(
        "instrument",
        _en(
            r"piano|keyboard|guitar|violin|cello|drums|ukulele|saxophone|sax|flute|trumpet|clarinet|"
            r"bass guitar"
        ),
        _zh(r"钢琴|电子琴|吉他|小提琴|大提琴|架子鼓|尤克里里|萨克斯|长笛|古筝|二胡|琵琶"),
        alone=False,
    ),
    Facet(
        "trip",
        _en(r"trip|trips|travel\w*|vacation|holiday|flight|journey|visit|visiting"),
        _zh(r"旅行|旅游|出游|之行|出去玩|机票|出差|行程|度假"),
        alone=False,
    ),
    Facet(
        "medication",
        re.compile(
            r"\b(?:medication|meds|prescri\w*|doses?|dosage|mg|insulin|pills?|inhaler|tablets?)\b|(?<=[0-9])mg\b",
            re.IGNORECASE,
        ),
        _zh(r"药|剂量|毫克|mg|胰岛素|服用"),
        alone=False,
        value_relations=frozenset({"doctor"}),  # who prescribed it, not whose it is
    ),
    Facet(
        "subscription",
        _en(r"subscri\w*|netflix|spotify|hulu|disney|membership|premium|prime"),
        _zh(r"会员|订阅|爱奇艺|腾讯视频|优酷|网易云|年费"),
        alone=False,
    ),
    Facet(
        "language_learning",
        _en(_LANGUAGES_EN),
        _zh(_LANGUAGES_ZH),
        alone=False,
        english_also=_en(r"learning|learns|studying|lessons|classes|duolingo|fluent|speaks?|speaking"),
        chinese_also=_zh(r"学|说|课|考"),
    ),
)


def facets(text: str) -> FacetWords:
    """The facets a fact touches (FACETS), each with the words of it the fact uses, read from its first
    MAX_FACT_CHARS characters."""
    clean = unicodedata.normalize("NFKC", text[:MAX_FACT_CHARS])
    chinese = language(clean) == CHINESE
    found: dict[str, frozenset[str]] = {}
    for facet in FACETS:
        pattern, also = (
            (facet.chinese, facet.chinese_also) if chinese else (facet.english, facet.english_also)
        )
        words = frozenset(_word(match.casefold()) for match in pattern.findall(clean))
        if words and (also is None or also.search(clean)):
            found[facet.name] = words
    for match in _FAVOURITE.finditer(clean):
        # A favourite is one per kind of thing: "favourite band" is a facet of its own.
        found[f"{FAVOURITE.name}:{_favourite_kind(match)}"] = frozenset({FAVOURITE.name})
    return found


def _favourite_kind(match: re.Match[str]) -> str:
    """The kind of thing a favourite is: the noun after "favourite" ("TV show": show), one word for
    its synonyms ("go-to spot" and "favourite restaurant" are one place)."""
    first, second, chinese = match.group(1), match.group(2), match.group(3)
    if chinese is not None:
        kind = chinese or "去"  # "最爱去的是...": a place
    elif second is not None and second.casefold() not in ENGLISH_STOPWORDS | _FAVOURITE_NOT_KINDS:
        kind = second
    else:
        kind = first
    word = kind.casefold()
    return _FAVOURITE_KINDS.get(word, _word(word))


def facet_named(name: str) -> Facet:
    """The facet a name of `facets` stands for ("favourite:band" is a FAVOURITE)."""
    return _BY_NAME.get(name) or FAVOURITE


# "favourite band", "favorite kind of music", "最喜欢的歌手": one favourite per kind of thing.
_FAVOURITE = re.compile(
    r"\b(?:favou?rite|go-to|main)\s+(?:kind of\s+|type of\s+)?([a-z]+)(?:[ \t]+([a-z]+))?|"
    r"最(?:喜欢|爱)(?:吃|喝|看|听|玩|用|去)?的([\u4e00-\u9fff]{0,3}?)(?:是|:|：)",
    re.IGNORECASE,
)
_FAVOURITE_NOT_KINDS = frozenset({"now", "these", "nowadays", "lately", "ever", "right", "by", "still"})
# One word for a kind of favourite however it is named.
_FAVOURITE_KINDS = {
    "spot": "place",
    "restaurant": "place",
    "eatery": "place",
    "joint": "place",
    "restaurants": "place",
    "去": "place",
    "餐厅": "place",
    "馆子": "place",
    "饭店": "place",
    "饭馆": "place",
    "店": "place",
    "film": "movie",
    "films": "movie",
    "movies": "movie",
    "series": "show",
    "电影": "movie",
    "片子": "movie",
}
# Found by _FAVOURITE, not by vocabulary: its own patterns never match.
FAVOURITE = Facet("favourite", re.compile(r"(?!)"), re.compile(r"(?!)"))
_BY_NAME = {facet.name: facet for facet in FACETS}


# Words before a quantity that say nothing of whose it is: the subject itself, when, and how it was read.
_EN_NOT_HOLDERS = frozenset(
    "i my me user user's the a latest last new current today's this morning now currently just".split()
)
_ZH_NOT_HOLDER = re.compile(
    r"用户|我|的|最新|最近|目前|现在|今早|今天|昨天|上次|这次|早上|晚上|了|一下|复查|体检|量|测|称|查|"
    r"[0-9.,，。、:：\s]"
)
# A holder in English is named: a capitalised word or a possessive ("Leo weighs", "Wei's glucose"), not
# a sentence's opening verb ("Stepped on the scale", "Weighed 75.5").
_EN_NAMED = re.compile(r"(?P<word>[A-Za-z][A-Za-z0-9.-]*(?:['’]s)?)")


def quantity_holder(text: str, facet: Facet) -> str:
    """Who a quantity of the facet belongs to, by what a text says before its first word of the facet
    ("Leo weighs 31kg": "leo"; "乐乐体重31公斤": "乐乐"), without the words that name the subject itself
    or a time ("I weigh", "用户最新的体重", "今早称了"): "" for the subject's own."""
    clean = unicodedata.normalize("NFKC", text[:MAX_FACT_CHARS])
    chinese = language(clean) == CHINESE
    found = (facet.chinese if chinese else facet.english).search(clean)
    before = clean[: found.start()] if found else clean
    if chinese:
        return _ZH_NOT_HOLDER.sub("", before.casefold())
    named = []
    for match in _EN_NAMED.finditer(before):
        word = match.group("word")
        opening_verb = match.start() == 0 and word.casefold().endswith(("ed", "ing"))
        if (word[0].isupper() or word.endswith(("'s", "’s"))) and not opening_verb:
            named.append(word.casefold())
    return " ".join(word for word in named if word not in _EN_NOT_HOLDERS)
