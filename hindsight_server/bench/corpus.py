"""Synthetic but realistic memories: mixed Chinese and English, several subjects, tiers and kinds."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

_ZH = [
    "用户偏好{seat}座位",
    "用户要求报表用{fmt}格式导出",
    "用户预订了{day}下午{building}栋的会议室，{n}个人",
    "用户说以后都用{lang}回复",
    "客服工单{n}：{product}无法登录，已重置密码",
    "用户住在{city}，常去{city}的分公司",
]
_EN = [
    "User prefers {seat_en} seats on long flights",
    "Exports should be in {fmt} format",
    "Booked the {building} building meeting room for {n} people on {day_en}",
    "Ticket {n}: {product} login fails after password reset",
    "User works from {city_en} on Mondays",
    "Always reply in {lang_en}",
]
_FILL = {
    "seat": ["靠窗", "靠过道", "前排"],
    "seat_en": ["window", "aisle", "front-row"],
    "fmt": ["CSV", "Excel", "PDF", "JSON"],
    "day": ["周一", "周三", "周五"],
    "day_en": ["Monday", "Wednesday", "Friday"],
    "building": ["A", "B", "C"],
    "lang": ["中文", "英文"],
    "lang_en": ["Chinese", "English"],
    "product": ["CRM", "ERP", "BI 看板"],
    "city": ["上海", "北京", "深圳"],
    "city_en": ["Berlin", "Shanghai", "Austin"],
}
_TIERS = ["working", "episodic", "semantic"]
_KINDS = {"working": ["task", "fact"], "episodic": ["event", "task"], "semantic": ["preference", "fact"]}


@dataclass(frozen=True, slots=True)
class SyntheticMemory:
    subject: str
    session_id: str
    tier: str
    kind: str
    content: str


def synthetic_memories(seed: int, subjects: int = 50) -> Iterator[SyntheticMemory]:
    rng = random.Random(seed)
    while True:
        template = rng.choice(_ZH + _EN)
        values = {key: rng.choice(options) for key, options in _FILL.items()}
        values["n"] = str(rng.randint(2, 9999))
        tier = rng.choice(_TIERS)
        subject = f"user-{rng.randrange(subjects)}"
        yield SyntheticMemory(
            subject=subject,
            session_id=f"{subject}-s{rng.randrange(20)}",
            tier=tier,
            kind=rng.choice(_KINDS[tier]),
            content=template.format(**values),
        )


# ------------------------------------------------------------------------------------------------------
# The recall benchmark's corpus: ~200 topic clusters of paraphrases, many tenants of skewed sizes.
#
# A topic is a family of paraphrases (Chinese, English, and both in one sentence) around one slot; each of
# its values makes a cluster, so the embedding space has structure at two levels (close clusters inside a
# family, distant families). The stream is prefix-stable: memory i is the same whatever the corpus size,
# so a larger load extends a smaller one and idempotency keys (seed, i) never collide.


@dataclass(frozen=True, slots=True)
class Topic:
    key: str
    kind: str  # the kind such a memory usually has (a tier that does not allow it picks another)
    entity: str  # entity name the value is stored under ("" when none)
    values: tuple[tuple[str, str], ...]  # (Chinese, English)
    zh: tuple[str, ...]
    en: tuple[str, ...]
    mixed: tuple[str, ...]
    ask_zh: tuple[str, ...]
    ask_en: tuple[str, ...]
    ask_mixed: tuple[str, ...]


def _topic(key: str, kind: str, entity: str, values: str, *texts: str) -> Topic:
    """values: "zh=en|zh=en|..."; texts: six "|"-separated groups (zh, en, mixed, ask zh, ask en, ask mixed).
    Placeholders: {v} {v_en} {who} {who_en} {n} {day} {day_en}."""
    pairs = tuple(tuple(pair.split("=", 1)) for pair in values.split("|"))
    groups = [tuple(text.split("|")) for text in texts]
    assert len(groups) == 6 and all(len(p) == 2 for p in pairs), key
    return Topic(key, kind, entity, pairs, *groups)  # type: ignore[arg-type]


TOPICS: tuple[Topic, ...] = (
    _topic(
        "seat",
        "preference",
        "seat",
        "靠窗=window|靠过道=aisle|前排=front-row|紧急出口那排=exit-row|后排安静区=quiet rear",
        "用户偏好{v}座位|{who}坐飞机总是要{v}的位置|订票时给用户选{v}座位，长途航班他特别在意",
        "User prefers {v_en} seats on long flights|Always book a {v_en} seat for {who_en}"
        "|{who_en} said a {v_en} seat makes long trips bearable",
        "用户说 long-haul flight 一定要 {v_en} seat|订机票 remember：{v}座位，not the middle",
        "用户坐飞机喜欢什么座位|订机票要选{v}吗",
        "which seat does the user prefer on flights|should I book a {v_en} seat",
        "用户的 flight seat preference 是什么",
    ),
    _topic(
        "export",
        "preference",
        "format",
        "CSV=CSV|Excel=Excel|PDF=PDF|JSON=JSON|Markdown=Markdown",
        "用户要求报表用{v}格式导出|以后的数据导出都用{v}，{who}说这样方便|财务那边只收{v}格式的报表",
        "Exports should be in {v_en} format|{who_en} wants every report exported as {v_en}"
        "|Send the monthly numbers as a {v_en} file, never anything else",
        "报表 export 用 {v_en} format|用户说 weekly report 要导出成 {v}",
        "报表应该导出成什么格式|用户要{v}格式的导出吗",
        "what format should exports use|does the user want {v_en} exports",
        "report 导出 format 是哪种",
    ),
    _topic(
        "reply_language",
        "instruction",
        "language",
        "中文=Chinese|英文=English|日文=Japanese|粤语=Cantonese|中英双语=bilingual Chinese and English",
        "用户说以后都用{v}回复|和{who}沟通请使用{v}|回复这个客户时统一用{v}",
        "Always reply in {v_en}|{who_en} asked us to answer in {v_en} from now on"
        "|Use {v_en} when talking to this customer",
        "Please reply in {v_en}，用户特别强调过|以后 answer 都用{v}",
        "应该用什么语言回复用户|用户要求用{v}回复吗",
        "which language should I reply in|did the user ask for replies in {v_en}",
        "回复 language 用哪个",
    ),
    _topic(
        "meeting_room",
        "event",
        "room",
        "长城厅=Great Wall room|黄山厅=Huangshan room"
        "|西湖厅=West Lake room|三楼大会议室=third-floor boardroom"
        "|小洽谈室=small huddle room",
        "用户预订了{day}下午的{v}，{n}个人|{who}订了{day}的{v}开评审会|{day}上午在{v}开会，记得提前调试投影",
        "Booked the {v_en} for {n} people on {day_en}|{who_en} reserved the {v_en} for the {day_en} review"
        "|Meeting in the {v_en} on {day_en} morning; test the projector first",
        "{day} 的 meeting 在 {v_en}，{n} 人|用户 booked {v}，for the {day_en} sync",
        "会议室订在哪里了|{v}订的是哪天",
        "which meeting room did we book|when is the {v_en} booked",
        "{day}的 meeting room 是哪个",
    ),
    _topic(
        "login_ticket",
        "event",
        "product",
        "CRM=CRM|ERP=ERP|BI 看板=BI dashboard|企业邮箱=company email|VPN=VPN",
        "客服工单{n}：{v}无法登录，已重置密码|用户反馈{v}登录一直失败，工单号{n}"
        "|{who}说{v}提示密码错误，已经帮他解锁",
        "Ticket {n}: {v_en} login fails after password reset|User cannot log into the {v_en}, ticket {n}"
        "|{who_en} was locked out of the {v_en}; account unlocked",
        "工单 {n}：{v_en} login failed，已 reset password|用户 {v} 登录不上，opened ticket {n}",
        "用户{v}登录的问题解决了吗|工单{n}是什么问题",
        "did we fix the {v_en} login problem|what was ticket {n} about",
        "{v} login issue 的进展",
    ),
    _topic(
        "home_city",
        "fact",
        "city",
        "上海=Shanghai|北京=Beijing|深圳=Shenzhen|杭州=Hangzhou|成都=Chengdu",
        "用户住在{v}|{who}常驻{v}，偶尔出差|用户说他的家在{v}，周末不出门",
        "User lives in {v_en}|{who_en} is based in {v_en} and travels now and then"
        "|The user's home is in {v_en}",
        "用户 lives in {v_en}，工作也在那边|{who} 现在 based in {v}",
        "用户住在哪个城市|用户是不是住在{v}",
        "where does the user live|is the user based in {v_en}",
        "用户 home city 是哪里",
    ),
    _topic(
        "diet",
        "preference",
        "diet",
        "素食=vegetarian|不吃辣=no spicy food|清真=halal|乳糖不耐=lactose-free|海鲜过敏=seafood allergy",
        "用户饮食：{v}|订餐时注意{who}是{v}|团建聚餐要照顾用户的{v}要求",
        "User's diet: {v_en}|Remember {who_en} needs {v_en} meals"
        "|Team dinners must respect the user's {v_en} needs",
        "订餐注意 user is {v_en}|用户 diet 要求：{v}",
        "用户有什么饮食忌口|订餐要注意{v}吗",
        "any dietary restrictions for the user|does the user need {v_en} food",
        "用户的 diet 要求是什么",
    ),
    _topic(
        "coffee",
        "preference",
        "drink",
        "美式=americano|拿铁=latte|燕麦拿铁=oat latte|手冲=pour-over|无咖啡因咖啡=decaf",
        "用户早上喝{v}|给{who}点咖啡要{v}|开会时准备{v}，用户不加糖",
        "User drinks {v_en} in the morning|Order a {v_en} for {who_en}"
        "|Get the user a {v_en} before meetings, no sugar",
        "用户 coffee 只喝 {v_en}|帮{who} order 一杯{v}",
        "用户喝什么咖啡|给用户点{v}对吗",
        "how does the user take coffee|should I order a {v_en}",
        "用户的 coffee order 是什么",
    ),
    _topic(
        "prog_language",
        "preference",
        "language",
        "Python=Python|Go=Go|Rust=Rust|TypeScript=TypeScript|Java=Java",
        "用户写代码偏好{v}|{who}的新项目都用{v}|示例代码请用{v}写",
        "User prefers {v_en} for new code|{who_en} writes all new services in {v_en}"
        "|Code samples should be in {v_en}",
        "示例 code 请用 {v_en}|用户说 backend 都用{v}",
        "用户喜欢用什么编程语言|示例代码用{v}吗",
        "which programming language does the user prefer|should the sample be in {v_en}",
        "用户 prefer 的 language 是什么",
    ),
    _topic(
        "code_style",
        "instruction",
        "",
        "四空格缩进=4-space indentation|类型注解=type hints everywhere|测试先行=tests first"
        "|函数不超过五十行=functions under 50 lines|英文提交信息=commit messages in English",
        "代码规范：{v}|{who}要求所有代码{v}|评审时检查是否{v}",
        "Code style: {v_en}|{who_en} requires {v_en} in every change|Reviews check for {v_en}",
        "code review 时注意 {v_en}|团队规范 {v}，no exceptions",
        "代码规范有什么要求|是不是要求{v}",
        "what are the code style rules|do we require {v_en}",
        "code style 规则有哪些",
    ),
    _topic(
        "notify_channel",
        "preference",
        "channel",
        "微信=WeChat|邮件=email|短信=SMS|钉钉=DingTalk|Slack=Slack",
        "通知用户请发{v}|{who}只看{v}消息|紧急情况用{v}联系用户",
        "Notify the user by {v_en}|{who_en} only reads {v_en}|Use {v_en} to reach the user in an emergency",
        "用户说 notifications 发 {v_en} 就行|urgent 的事情用{v}",
        "怎么通知用户比较好|用户是用{v}联系吗",
        "how should I notify the user|does the user want {v_en} notifications",
        "用户 prefer 哪个 notification channel",
    ),
    _topic(
        "availability",
        "preference",
        "",
        "上午=mornings|下午=afternoons|晚上八点以后=after 8 pm|周末=weekends|午休时间=lunch breaks",
        "{v}不要给用户打电话|{who}说{v}没空|约会议避开{v}",
        "Do not call the user in the {v_en}|{who_en} is unavailable {v_en}|Avoid scheduling meetings {v_en}",
        "用户 {v_en} 不方便，别打电话|schedule meeting 避开{v}",
        "什么时候不方便联系用户|{v}可以打给用户吗",
        "when should I not call the user|can I call the user {v_en}",
        "用户 busy 的时间段",
    ),
    _topic(
        "hotel",
        "preference",
        "hotel",
        "高楼层=high floor|无烟房=non-smoking room|大床房=king bed"
        "|靠近地铁=near the metro|含早餐=breakfast included",
        "订酒店要{v}|{who}出差住酒店一定要{v}|用户说酒店最重要的是{v}",
        "Hotels: {v_en}|{who_en} always wants a {v_en} when travelling"
        "|For the user the must-have in a hotel is {v_en}",
        "hotel 要 {v_en}，用户强调过|出差住宿 {v} please",
        "订酒店有什么要求|酒店要{v}吗",
        "any hotel preferences|does the user need a {v_en}",
        "用户的 hotel 偏好",
    ),
    _topic(
        "payment",
        "preference",
        "payment",
        "支付宝=Alipay|微信支付=WeChat Pay|信用卡=credit card"
        "|公司报销=company invoice|银行转账=bank transfer",
        "用户付款用{v}|{who}习惯{v}结算|续费默认走{v}",
        "User pays with {v_en}|{who_en} settles by {v_en}|Renewals are paid by {v_en} by default",
        "付款 method 用 {v_en}|续费 default {v}",
        "用户用什么方式付款|可以用{v}付吗",
        "how does the user pay|can the user pay by {v_en}",
        "payment method 是哪个",
    ),
    _topic(
        "expense_task",
        "task",
        "",
        "差旅报销=travel expenses|发票抬头=invoice title"
        "|增值税专票=VAT invoice|月度对账=monthly reconciliation"
        "|采购单=purchase order",
        "{day}之前提交{v}|提醒{who}处理{v}，金额{n}元|{v}还没办完，财务在催",
        "Submit the {v_en} before {day_en}|Remind {who_en} about the {v_en}, {n} yuan"
        "|The {v_en} is overdue; finance is asking",
        "{v_en} 要在 {day} 前 submit|提醒用户 {v}，amount {n}",
        "{v}办好了吗|还有什么报销没做",
        "is the {v_en} done|what expense tasks are open",
        "{v} 的 deadline 是什么时候",
    ),
    _topic(
        "family_birthday",
        "fact",
        "relation",
        "女儿=daughter|儿子=son|妻子=wife|母亲=mother|父亲=father",
        "用户{v}的生日是{n}号|{who}提到{v}下个月过生日|记得{v}生日时提醒用户订蛋糕",
        "The user's {v_en}'s birthday is on the {n}th|{who_en} said the {v_en} has a birthday next month"
        "|Remind the user to order a cake for the {v_en}'s birthday",
        "用户 {v_en} 的 birthday 快到了|{v}生日 remember to remind",
        "用户{v}的生日是哪天|家里谁快过生日了",
        "when is the {v_en}'s birthday|whose birthday is coming up",
        "{v} birthday 是几号",
    ),
    _topic(
        "pet",
        "fact",
        "pet",
        "猫=cat|狗=dog|金鱼=goldfish|兔子=rabbit|鹦鹉=parrot",
        "用户养了一只{v}|{who}出差时要找人照顾{v}|用户的{v}最近生病了",
        "The user has a {v_en}|{who_en} needs a sitter for the {v_en} when travelling"
        "|The user's {v_en} has been ill",
        "用户 has a {v_en}，出差要人照顾|{v} 最近 sick",
        "用户养什么宠物|用户的{v}怎么样了",
        "does the user have a pet|how is the user's {v_en}",
        "用户的 pet 是什么",
    ),
    _topic(
        "fitness",
        "preference",
        "sport",
        "跑步=running|游泳=swimming|瑜伽=yoga|骑行=cycling|羽毛球=badminton",
        "用户每周{v}三次|{who}喜欢{v}，周末常去|用户最近开始{v}减压",
        "User goes {v_en} three times a week|{who_en} loves {v_en} on weekends"
        "|The user took up {v_en} to de-stress",
        "用户 weekly {v_en} 三次|{who} 最近迷上{v}",
        "用户平时做什么运动|用户还在{v}吗",
        "what sport does the user do|is the user still into {v_en}",
        "用户的 workout 习惯",
    ),
    _topic(
        "music",
        "preference",
        "genre",
        "古典音乐=classical music|爵士=jazz|民谣=folk|摇滚=rock|粤语老歌=Cantopop classics",
        "用户工作时听{v}|{who}最喜欢{v}|推荐歌单时以{v}为主",
        "User listens to {v_en} while working|{who_en}'s favourite is {v_en}|Playlists should lean on {v_en}",
        "用户 working 时听 {v_en}|推荐 playlist 多放{v}",
        "用户喜欢听什么音乐|推荐{v}合适吗",
        "what music does the user like|should I recommend {v_en}",
        "用户的 music taste",
    ),
    _topic(
        "report_schedule",
        "task",
        "report",
        "周报=weekly report|月报=monthly report|季度复盘=quarterly review"
        "|日报=daily standup notes|年度总结=annual summary",
        "{day}要交{v}|{who}负责写{v}，别忘了|{v}模板已更新，下次按新版写",
        "The {v_en} is due on {day_en}|{who_en} owns the {v_en}; do not forget it"
        "|The {v_en} template changed; use the new one",
        "{v_en} 要在 {day} 交|用户说 {v} template 换了",
        "{v}什么时候交|要写哪些报告",
        "when is the {v_en} due|which reports do I owe",
        "{v} deadline 是哪天",
    ),
    _topic(
        "delivery",
        "preference",
        "address",
        "公司前台=office reception|家门口=front door|快递柜=parcel locker"
        "|物业=building management|楼下便利店=corner shop",
        "快递放{v}|{who}说包裹送到{v}就行|用户要求外卖放在{v}",
        "Leave parcels at the {v_en}|{who_en} wants deliveries left with {v_en}"
        "|Food deliveries go to the {v_en}",
        "package 放 {v_en} 就好|快递 deliver to {v}",
        "快递应该放哪里|包裹可以放{v}吗",
        "where should deliveries go|can parcels be left at the {v_en}",
        "delivery 放哪",
    ),
    _topic(
        "shipping_complaint",
        "event",
        "issue",
        "包裹延迟=late parcel|商品破损=damaged item|发错货=wrong item"
        "|少件=missing items|退款未到账=refund not received",
        "用户投诉{v}，订单{n}|{who}反映{v}，已经补发|订单{n}出现{v}，客服已跟进",
        "Complaint: {v_en} on order {n}|{who_en} reported a {v_en}; replacement sent"
        "|Order {n} had a {v_en}; support is on it",
        "order {n} {v_en}，用户很不满意|{v} complaint 已 escalate",
        "用户投诉了什么|订单{n}的问题处理了吗",
        "what did the user complain about|was the {v_en} on order {n} resolved",
        "{v} complaint 的结果",
    ),
    _topic(
        "plan",
        "fact",
        "plan",
        "免费版=free plan|专业版=Pro plan|团队版=Team plan|企业版=Enterprise plan|教育版=Education plan",
        "用户目前是{v}|{who}的团队上个月升级到{v}|用户在考虑换成{v}",
        "The user is on the {v_en}|{who_en}'s team upgraded to the {v_en} last month"
        "|The user is considering the {v_en}",
        "用户现在 on {v_en}|考虑 upgrade 到{v}",
        "用户订阅的是哪个版本|用户是{v}吗",
        "which plan is the user on|is the user on the {v_en}",
        "用户的 subscription plan",
    ),
    _topic(
        "meeting_style",
        "preference",
        "",
        "视频会议=video calls|电话=phone calls|面对面=in person"
        "|异步文字沟通=async written updates|短会=short meetings",
        "用户更喜欢{v}|{who}说沟通尽量{v}|和用户开会请安排{v}",
        "User prefers {v_en}|{who_en} asked for {v_en} where possible|Set up {v_en} with the user",
        "用户 prefer {v_en}，效率高|沟通方式 {v} 最好",
        "用户喜欢怎么开会|用{v}沟通可以吗",
        "how does the user like to meet|are {v_en} ok with the user",
        "用户的 meeting style",
    ),
    _topic(
        "timezone",
        "fact",
        "timezone",
        "北京时间=Beijing time|柏林时间=Berlin time"
        "|美东时间=US Eastern time|东京时间=Tokyo time|伦敦时间=London time",
        "用户按{v}安排日程|{who}在{v}工作|约时间请换算成{v}",
        "The user schedules in {v_en}|{who_en} works on {v_en}|Convert meeting times to {v_en}",
        "用户 timezone 是 {v_en}|约 meeting 用{v}",
        "用户在哪个时区|是按{v}约吗",
        "which time zone is the user in|should I use {v_en}",
        "用户的 timezone",
    ),
    _topic(
        "project_deadline",
        "task",
        "project",
        "官网改版=website redesign|数据迁移=data migration|移动端发布=mobile release|安全审计=security audit"
        "|预算规划=budget planning",
        "{v}的截止日期是{day}|{who}负责{v}，进度{n}%|{v}延期了，新日期待定",
        "The {v_en} is due {day_en}|{who_en} leads the {v_en}, {n}% done"
        "|The {v_en} slipped; new date pending",
        "{v_en} deadline 在 {day}|{v} progress {n}%",
        "{v}什么时候截止|项目进度怎么样",
        "when is the {v_en} due|how far along is the {v_en}",
        "{v} 的 status",
    ),
    _topic(
        "health",
        "fact",
        "condition",
        "高血压=high blood pressure|哮喘=asthma|花粉过敏=pollen allergy|腰椎不好=back problems|失眠=insomnia",
        "用户有{v}|{who}提到自己{v}，需要注意|安排行程时考虑用户的{v}",
        "The user has {v_en}|{who_en} mentioned {v_en}; take care|Plan trips with the user's {v_en} in mind",
        "用户 has {v_en}，行程别太累|注意 {v} 的情况",
        "用户有什么健康问题|用户是不是{v}",
        "does the user have health issues|does the user have {v_en}",
        "用户的 health condition",
    ),
    _topic(
        "reading",
        "preference",
        "genre",
        "科幻小说=science fiction|历史书=history books"
        "|商业管理=business books|推理小说=mystery novels|诗歌=poetry",
        "用户爱看{v}|{who}最近在读{v}|送书的话选{v}",
        "User reads {v_en}|{who_en} is reading {v_en} lately|If we gift a book, pick {v_en}",
        "用户 loves {v_en}|送 book 选{v}",
        "用户喜欢读什么书|送{v}合适吗",
        "what does the user like to read|would {v_en} make a good gift",
        "用户的 reading taste",
    ),
    _topic(
        "commute",
        "fact",
        "commute",
        "地铁=metro|开车=driving|骑电动车=e-bike|公交=bus|步行=walking",
        "用户通勤靠{v}|{who}每天{v}上班，大约{n}分钟|下雨天用户还是{v}",
        "The user commutes by {v_en}|{who_en} gets to work by {v_en}, about {n} minutes"
        "|Even in rain the user goes by {v_en}",
        "用户 commute 用 {v_en}|{v}上班 around {n} min",
        "用户怎么上班|用户是{v}通勤吗",
        "how does the user commute|does the user go by {v_en}",
        "用户的 commute 方式",
    ),
    _topic(
        "learning",
        "task",
        "skill",
        "日语=Japanese|英语口语=spoken English|机器学习=machine learning|吉他=guitar|摄影=photography",
        "用户在学{v}|{who}给自己定了学{v}的目标|每周提醒用户练习{v}",
        "The user is learning {v_en}|{who_en} set a goal to learn {v_en}"
        "|Remind the user weekly to practise {v_en}",
        "用户 learning {v_en}，每周练习|{v} 学习 goal",
        "用户在学什么|用户的{v}学得怎么样",
        "what is the user learning|how is the user's {v_en} going",
        "用户的 learning goal",
    ),
    _topic(
        "tone",
        "instruction",
        "",
        "简洁=concise|正式=formal|口语化=casual|多用要点列表=bullet points|先给结论=conclusion first",
        "回答要{v}|{who}希望回复{v}|写邮件给用户时保持{v}",
        "Keep answers {v_en}|{who_en} wants replies {v_en}|Emails to the user: {v_en}",
        "回复 style：{v_en}|用户说 answer 要{v}",
        "用户喜欢什么样的回复风格|回复要{v}吗",
        "what tone should replies have|should answers be {v_en}",
        "reply 风格要求",
    ),
    _topic(
        "device",
        "fact",
        "device",
        "Mac=Mac|Windows=Windows|Linux=Linux|iPhone=iPhone|安卓手机=Android phone",
        "用户用{v}|{who}的工作电脑是{v}|安装说明请按{v}写",
        "The user is on {v_en}|{who_en}'s work machine runs {v_en}|Write install steps for {v_en}",
        "用户 uses {v_en}|安装 guide 按{v}写",
        "用户用什么设备|用户是{v}吗",
        "what device does the user use|is the user on {v_en}",
        "用户的 device",
    ),
    _topic(
        "cloud",
        "fact",
        "cloud",
        "阿里云=Alibaba Cloud|AWS=AWS|腾讯云=Tencent Cloud|Azure=Azure|自建机房=on-prem data center",
        "用户的服务部署在{v}|{who}的团队准备迁到{v}|生产环境在{v}，测试环境另说",
        "The user's services run on {v_en}|{who_en}'s team plans to move to {v_en}|Production is on {v_en}",
        "production 部署在 {v_en}|团队 migrate 到{v}",
        "用户的服务部署在哪里|是不是在{v}上",
        "where are the user's services hosted|are they on {v_en}",
        "用户用的 cloud provider",
    ),
    _topic(
        "bug_report",
        "event",
        "bug",
        "页面白屏=blank page|导出超时=export timeout"
        "|图表不显示=charts not rendering|搜索结果为空=empty search results"
        "|上传失败=upload fails",
        "用户报告{v}，版本{n}|{who}又遇到{v}，已转给研发|{v}问题复现了，工单{n}",
        "Bug: {v_en} in build {n}|{who_en} hit the {v_en} again; escalated to engineering"
        "|Reproduced the {v_en}, ticket {n}",
        "用户 report {v_en}，build {n}|{v} bug 又出现了",
        "用户报过什么bug|{v}修好了吗",
        "which bugs did the user report|is the {v_en} fixed",
        "{v} bug 的状态",
    ),
    _topic(
        "purchase",
        "event",
        "item",
        "笔记本电脑=laptop|显示器=monitor|机械键盘=mechanical keyboard"
        "|耳机=headphones|打印机墨盒=printer ink",
        "用户买了{v}，订单{n}|{who}上周下单了{v}|{v}已签收，用户很满意",
        "The user bought a {v_en}, order {n}|{who_en} ordered {v_en} last week"
        "|The {v_en} arrived; the user is happy",
        "用户 ordered {v_en}，订单 {n}|{v} delivered",
        "用户最近买了什么|{v}到了吗",
        "what did the user buy recently|did the {v_en} arrive",
        "用户的 purchase history",
    ),
    _topic(
        "budget",
        "fact",
        "budget",
        "酒店每晚=hotel per night|机票=flights|餐饮=meals|团建=team outings|软件采购=software purchases",
        "{v}预算上限{n}元|{who}说{v}不能超过{n}元|今年{v}预算收紧了",
        "Budget cap for {v_en}: {n} yuan|{who_en} said {v_en} must stay under {n}"
        "|The {v_en} budget is tighter this year",
        "{v_en} budget 上限 {n}|{v} 不能 over budget",
        "{v}的预算是多少|预算有什么限制",
        "what is the budget for {v_en}|what budget limits apply",
        "{v} budget 多少",
    ),
    _topic(
        "vacation",
        "event",
        "destination",
        "云南=Yunnan|日本=Japan|海南=Hainan|新疆=Xinjiang|欧洲=Europe",
        "用户计划去{v}旅行|{who}{day}出发去{v}，玩{n}天|用户刚从{v}回来",
        "The user plans a trip to {v_en}|{who_en} leaves for {v_en} on {day_en}"
        "|The user just got back from {v_en}",
        "用户 trip to {v_en}，{n} 天|{v} vacation 已经订好",
        "用户要去哪里度假|去{v}的行程定了吗",
        "where is the user going on holiday|is the {v_en} trip booked",
        "用户的 vacation plan",
    ),
    _topic(
        "contact",
        "fact",
        "department",
        "财务=finance|法务=legal|IT 支持=IT support|人事=HR|销售=sales",
        "{v}的对接人是{who}|有{v}问题找{who}|{who}调去{v}了",
        "The {v_en} contact is {who_en}|Ask {who_en} about {v_en} questions|{who_en} moved to {v_en}",
        "{v_en} 的 contact 是 {who}|{v} 问题 ask {who_en}",
        "{v}找谁|谁负责{v}",
        "who is the {v_en} contact|who handles {v_en}",
        "{v} contact person",
    ),
    _topic(
        "privacy",
        "instruction",
        "",
        "不要保存身份证号=never store ID numbers|电话号码打码=mask phone numbers"
        "|不要分享给第三方=never share with third parties"
        "|只保留三十天=keep data for 30 days only|客户名用缩写=use initials for client names",
        "隐私要求：{v}|{who}强调{v}|处理用户数据时{v}",
        "Privacy rule: {v_en}|{who_en} insisted: {v_en}|When handling user data, {v_en}",
        "privacy：{v_en}|数据处理 rule：{v}",
        "用户有什么隐私要求|是不是要{v}",
        "what privacy rules apply|must we {v_en}",
        "privacy 要求有哪些",
    ),
    _topic(
        "session_summary",
        "summary",
        "topic",
        "需求讨论=requirements discussion|周会纪要=weekly meeting notes|面试反馈=interview feedback"
        "|客户拜访=customer visit|故障复盘=incident review",
        "{v}总结：确定了{n}项行动|{who}主持的{v}，结论已同步|{day}的{v}要点已整理",
        "Summary of the {v_en}: {n} action items"
        "|{who_en} ran the {v_en}; outcome shared|Notes from the {day_en} {v_en}",
        "{v_en} summary：{n} action items|{day} 的 {v} notes",
        "{v}的结论是什么|上次{v}说了什么",
        "what came out of the {v_en}|summarise the last {v_en}",
        "{v} 的 summary",
    ),
)

_WHO = ("张伟", "李娜", "王芳", "刘洋", "陈静", "杨帆", "赵磊", "黄敏")
_WHO_EN = ("Alice", "Ben", "Chen Wei", "Dana", "Emma", "Farid", "Grace", "Hiro")
_DAYS = (
    ("周一", "Monday"),
    ("周二", "Tuesday"),
    ("周三", "Wednesday"),
    ("周四", "Thursday"),
    ("周五", "Friday"),
)
_SUFFIX = {
    "zh": (
        "（第{n}次对话中提到）",
        "，{day}确认过",
        "（来自和{who}的会话）",
        "，{who}补充了细节",
        "。备注{n}",
    ),
    "en": (
        " (noted in conversation #{n})",
        " - confirmed on {day_en}",
        " (from a chat with {who_en})",
        ", ref {n}",
    ),
}
_ASK_PREFIX = {
    "zh": ("请问", "帮我查一下：", "你还记得", "之前说过"),
    "en": ("Do you remember: ", "Quick check - ", "Hey, ", "Remind me "),
    "mixed": ("请问 ", "Quick check：", "帮我 check 一下："),
}
# A time expression in the query text; the server may parse it into a time range.
TIME_EXPRESSIONS = {
    "zh": ("上周", "昨天", "最近三天", "上个月", "今天", "前天", "这周", "最近半年"),
    "en": ("last week", "yesterday", "in the past 3 days", "last month", "today", "this week"),
    "mixed": ("上周", "last month", "yesterday", "最近三天"),
}
CLUSTERS = len(TOPICS) * 5  # every topic has five values
assert all(len(topic.values) == 5 for topic in TOPICS)

_TIER_SHARE = (("working", 0.2), ("episodic", 0.4), ("semantic", 0.4))
_TIER_KINDS = {
    "working": ("task", "summary", "fact", "instruction"),
    "episodic": ("event", "task", "summary"),
    "semantic": ("preference", "fact", "instruction"),
}
_DAY_S = 86_400.0
_FOCUS_CLUSTERS = 30  # each tenant talks mostly about these clusters


@dataclass(frozen=True, slots=True)
class CorpusMemory:
    index: int
    tenant: int
    subject: str
    session_id: str
    tier: str
    kind: str
    cluster: int  # topic index * 5 + value index
    language: str  # zh, en, mixed
    content: str
    entities: dict[str, str]
    confidence: float
    age_s: float  # how long before the load it happened (occurred_at = load time - age)
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class RecallCorpus:
    seed: int
    tenants: int
    memories: list[CorpusMemory]
    label: str = ""  # a real-text corpus's own prefix (eval_corpus.py)
    questions: tuple[str, ...] = ()  # a real-text corpus's queries; none: synthetic ones (recall_query)
    users: int = 0  # a real-text corpus's subjects per tenant

    @property
    def prefix(self) -> str:
        """Tenants of this corpus share it; it changes whenever the stream would (version, seed, tenants)."""
        return self.label or f"rbench-v1-s{self.seed}-t{self.tenants}"

    def tenant_id(self, tenant: int) -> str:
        return f"{self.prefix}-{tenant:03d}"

    @property
    def meta_tenant(self) -> str:
        return f"{self.prefix}-meta"

    def tenant_sizes(self) -> list[int]:
        sizes = [0] * self.tenants
        for memory in self.memories:
            sizes[memory.tenant] += 1
        return sizes


def tenant_weights(tenants: int) -> list[float]:
    """Zipf (s=1) sizes: with 100 tenants the largest holds ~19% of the memories, the smallest ~0.2%."""
    return [1.0 / (rank + 1) for rank in range(tenants)]


def recall_corpus(count: int, *, tenants: int = 100, seed: int = 7) -> RecallCorpus:
    """The first `count` memories of the (seed, tenants) stream."""
    if tenants < 1:
        raise ValueError("tenants must be at least 1")
    return RecallCorpus(seed, tenants, list(itertools.islice(_recall_stream(tenants, seed), count)))


def _recall_stream(tenants: int, seed: int) -> Iterator[CorpusMemory]:
    rng = random.Random(f"recall-corpus:{seed}:{tenants}")
    weights = tenant_weights(tenants)
    total = sum(weights)
    tenant_cum = list(itertools.accumulate(weights))
    subjects: list[int] = []
    subject_cum: list[list[float]] = []
    focus: list[list[int]] = []
    for tenant in range(tenants):
        local = random.Random(f"recall-tenant:{seed}:{tenant}")
        count = 3 + int(weights[tenant] / total * 3_000)  # bigger tenants have more users
        subjects.append(count)
        subject_cum.append(list(itertools.accumulate(1.0 / (j + 1) ** 0.8 for j in range(count))))
        focus.append(local.sample(range(CLUSTERS), _FOCUS_CLUSTERS))
    tiers = [name for name, _ in _TIER_SHARE]
    tier_cum = list(itertools.accumulate(share for _, share in _TIER_SHARE))
    for index in itertools.count():
        tenant = rng.choices(range(tenants), cum_weights=tenant_cum)[0]
        user = rng.choices(range(subjects[tenant]), cum_weights=subject_cum[tenant])[0]
        subject = f"user-{user}"
        cluster = rng.choice(focus[tenant]) if rng.random() < 0.75 else rng.randrange(CLUSTERS)
        topic = TOPICS[cluster // 5]
        value_zh, value_en = topic.values[cluster % 5]
        tier = rng.choices(tiers, cum_weights=tier_cum)[0]
        allowed = _TIER_KINDS[tier]
        kind = topic.kind if topic.kind in allowed and rng.random() < 0.6 else rng.choice(allowed)
        age_s = _age_s(rng, tier)
        day = int(age_s // _DAY_S)
        language = rng.choices(("zh", "en", "mixed"), cum_weights=(0.45, 0.8, 1.0))[0]
        template = rng.choice({"zh": topic.zh, "en": topic.en, "mixed": topic.mixed}[language])
        content = template.format(**_fill(rng, value_zh, value_en))
        if rng.random() < 0.4:
            suffix = rng.choice(_SUFFIX["en" if language == "en" else "zh"])
            content += suffix.format(**_fill(rng, value_zh, value_en))
        entities = {topic.entity: value_en} if topic.entity and rng.random() < 0.5 else {}
        confidence = (
            round(rng.uniform(0.75, 1.0), 2) if rng.random() < 0.94 else round(rng.uniform(0.4, 0.69), 2)
        )
        yield CorpusMemory(
            index=index,
            tenant=tenant,
            subject=subject,
            session_id=f"{subject}-d{day}{'ab'[rng.randrange(2)]}",
            tier=tier,
            kind=kind,
            cluster=cluster,
            language=language,
            content=content,
            entities=entities,
            confidence=confidence,
            age_s=age_s,
            idempotency_key=f"rbench:{seed}:{index}",
        )


def _age_s(rng: random.Random, tier: str) -> float:
    """Working memory is mostly from the last day (some older rows: expired, awaiting the purge), episodic
    memory leans recent, semantic memory spreads over the last 180 days."""
    if tier == "working":
        days = rng.uniform(0, 0.8) if rng.random() < 0.85 else rng.uniform(1, 14)
    elif tier == "episodic":
        days = min(rng.expovariate(1 / 25), 180)
    else:
        days = rng.uniform(0, 180)
    return days * _DAY_S


def _fill(rng: random.Random, value_zh: str, value_en: str) -> dict[str, str]:
    who = rng.randrange(len(_WHO))
    day_zh, day_en = rng.choice(_DAYS)
    return {
        "v": value_zh,
        "v_en": value_en,
        "who": _WHO[who],
        "who_en": _WHO_EN[who],
        "n": str(rng.randint(2, 9999)),
        "day": day_zh,
        "day_en": day_en,
    }


@dataclass(frozen=True, slots=True)
class RecallQuerySpec:
    """One realistic Recall: the text and the optional parts an agent sets."""

    tenant_id: str
    text: str
    language: str
    subject: str = ""
    session_id: str = ""
    tiers: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    entities: dict[str, str] | None = None
    start: datetime | None = None  # an explicit time range (open end)
    top_k: int = 0
    time_expression: bool = False


def recall_query(corpus: RecallCorpus, rng: random.Random, now: datetime) -> RecallQuerySpec:
    """A query about a random memory's topic cluster, from that memory's tenant (so tenants are picked
    as often as they hold data), asked in zh, en or both, with the optional parts agents set at realistic
    rates."""
    memory = rng.choice(corpus.memories)
    topic = TOPICS[memory.cluster // 5]
    value_zh, value_en = topic.values[memory.cluster % 5]
    language = rng.choices(("zh", "en", "mixed"), cum_weights=(0.45, 0.85, 1.0))[0]
    asks = {"zh": topic.ask_zh, "en": topic.ask_en, "mixed": topic.ask_mixed}[language]
    text = rng.choice(asks).format(**_fill(rng, value_zh, value_en))
    if rng.random() < 0.3:
        text = rng.choice(_ASK_PREFIX[language]) + text
    time_expression = rng.random() < 0.2
    if time_expression:
        expression = rng.choice(TIME_EXPRESSIONS[language])
        text = f"{expression}{text}" if language != "en" else f"{text} {expression}"
    tiers: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    if rng.random() < 0.15:
        if rng.random() < 0.5:
            tiers = rng.choice((("semantic",), ("episodic", "working"), ("semantic", "episodic")))
        else:
            kinds = rng.choice((("preference",), ("event", "task"), ("fact", "preference"), ("instruction",)))
    entities = {topic.entity: value_en} if topic.entity and rng.random() < 0.08 else None
    start = now - timedelta(days=rng.choice((1, 7, 30, 90))) if rng.random() < 0.08 else None
    return RecallQuerySpec(
        tenant_id=corpus.tenant_id(memory.tenant),
        text=text,
        language=language,
        subject=memory.subject if rng.random() < 0.6 else "",
        session_id=memory.session_id if rng.random() < 0.25 else "",
        tiers=tiers,
        kinds=kinds,
        entities=entities,
        start=start,
        top_k=0 if rng.random() < 0.75 else rng.choice((3, 10, 20)),
        time_expression=time_expression,
    )
