"""The console's words in English and Chinese: one catalogue, and the choice between them from the
browser's Accept-Language (a zh* language ranked above any English one -> Chinese). Memory content is
never translated: it is shown as written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

__all__ = ["CATALOGUE", "Language", "negotiate", "translate"]

Language = Literal["en", "zh"]
MAX_ACCEPT_LANGUAGE = 512  # a longer header is read no further

# key -> (English, Chinese). Placeholders in str.format style; every key has both.
CATALOGUE: Mapping[str, tuple[str, str]] = {
    "app.title": ("hindsight console", "hindsight 控制台"),
    "nav.memories": ("Memories", "记忆"),
    "nav.recall": ("Recall playground", "召回试验"),
    "nav.pending": ("Pending", "待确认"),
    "nav.erasure": ("Erasure", "擦除"),
    "nav.ops": ("Operations", "运行状态"),
    "nav.logout": ("Log out", "退出登录"),
    "nav.skip": ("Skip to content", "跳到正文"),
    "login.title": ("Log in", "登录"),
    "login.tenant": ("Tenant", "租户"),
    "login.key": ("API key", "API 密钥"),
    "login.key_help": (
        "A key from `hindsight tenants create`; it stays on the console's server, never in a page or URL.",
        "由 `hindsight tenants create` 生成的密钥；它只保存在控制台服务器上，不会出现在页面或网址中。",
    ),
    "login.submit": ("Log in", "登录"),
    "login.refused": ("The memory server refused this key: {reason}", "记忆服务器拒绝了此密钥：{reason}"),
    "login.unreachable": ("The memory server cannot be reached: {reason}", "无法连接记忆服务器：{reason}"),
    "login.throttled": (
        "Too many failed logins from this address; wait a minute.",
        "此地址登录失败次数过多，请一分钟后再试。",
    ),
    "login.expired": ("Your session ended; log in again.", "会话已结束，请重新登录。"),
    "who": ("Tenant {tenant}", "租户 {tenant}"),
    "csrf.refused": (
        "This form is stale or did not come from the console (CSRF token missing or wrong). Reload the page.",
        "表单已过期或并非来自控制台（CSRF 令牌缺失或错误）。请刷新页面。",
    ),
    "error.title": ("Something went wrong", "出错了"),
    "error.rpc": ("The memory server answered {code}: {details}", "记忆服务器返回 {code}：{details}"),
    "error.field": ("{field}: {message}", "{field}：{message}"),
    "error.not_found": ("No such page.", "没有这个页面。"),
    "subjects.title": ("Subjects", "主体"),
    "subjects.help": (
        "Subjects among the tenant's first {scanned} memories (newest first){cut}.",
        "租户最新的 {scanned} 条记忆中出现的主体{cut}。",
    ),
    "subjects.cut": (
        ", the scan stopped at its limit: open a subject by name below",
        "，扫描已达上限：可在下方按名称打开主体",
    ),
    "subjects.none": ("No memories yet.", "还没有记忆。"),
    "subjects.open": ("Open a subject", "打开主体"),
    "subjects.name": ("Subject", "主体"),
    "subjects.default": ("(default subject)", "（默认主体）"),
    "subjects.count": ("Memories", "记忆数"),
    "filter.title": ("Filter", "筛选"),
    "filter.tier": ("Tier", "层级"),
    "filter.kind": ("Kind", "类型"),
    "filter.status": ("Status", "状态"),
    "filter.text": ("Text contains", "内容包含"),
    "filter.since": ("Recorded from", "记录时间起"),
    "filter.until": ("Recorded until", "记录时间止"),
    "filter.any": ("any", "全部"),
    "filter.apply": ("Apply", "应用"),
    "filter.page_size": ("Per page", "每页"),
    "memories.title": ("Memories of {subject}", "{subject} 的记忆"),
    "memories.none": ("No memory matches.", "没有符合条件的记忆。"),
    "memories.next": ("Next page", "下一页"),
    "memories.first": ("First page", "第一页"),
    "memories.scanned": (
        "{shown} shown of {scanned} scanned; the rest of the scan limit continues on the next page.",
        "已扫描 {scanned} 条，显示 {shown} 条；其余在下一页继续。",
    ),
    "col.content": ("Content", "内容"),
    "col.tier": ("Tier", "层级"),
    "col.kind": ("Kind", "类型"),
    "col.status": ("Status", "状态"),
    "col.created": ("Recorded", "记录于"),
    "col.confidence": ("Confidence", "置信度"),
    "col.select": ("Select", "选择"),
    "col.agent": ("Agent", "智能体"),
    "detail.title": ("Memory {id}", "记忆 {id}"),
    "detail.fields": ("Fields", "字段"),
    "detail.provenance": ("Provenance", "来源"),
    "detail.no_provenance": ("No provenance recorded.", "没有记录来源。"),
    "detail.history": ("Version chain", "版本链"),
    "detail.as_of": ("Believed at", "某时刻的认知"),
    "detail.as_of_help": ("Which version was believed at this time", "此时刻所相信的版本"),
    "detail.as_of_result": (
        "At {time} the believed version was {id} (version {version}).",
        "在 {time}，所相信的版本是 {id}（第 {version} 版）。",
    ),
    "detail.as_of_none": (
        "At {time} none of these versions was recorded yet.",
        "在 {time}，这些版本都还没有记录。",
    ),
    "detail.show": ("Show", "显示"),
    "detail.current": ("current", "当前"),
    "detail.valid": ("Valid", "有效期"),
    "detail.version": ("Version", "版本"),
    "detail.version_value": (
        "{version} · written {seen} times · {visibility} · embedding {embedding}",
        "{version} · 写入 {seen} 次 · {visibility} · 嵌入 {embedding}",
    ),
    "detail.entity": ("Entity {name}", "实体 {name}"),
    "detail.derived_from": ("Derived from", "派生自"),
    "detail.derived_to": ("Derived into", "派生出"),
    "detail.derived_none": ("None.", "无。"),
    "detail.derived_scan": (
        "(among the subject's {scanned} latest memories)",
        "（在该主体最新的 {scanned} 条记忆中）",
    ),
    "detail.recall_this": ("Why is this (not) recalled?", "为什么召回（或没召回）它？"),
    "recall.title": ("Recall playground", "召回试验"),
    "recall.query": ("Query", "查询"),
    "recall.subject": ("Subject", "主体"),
    "recall.session": ("Session", "会话"),
    "recall.profile": ("Profile", "权重配置"),
    "recall.budget": ("Token budget", "令牌预算"),
    "recall.top_k": ("Top k", "返回条数"),
    "recall.expected": ("Expected memory id (why not?)", "期望的记忆 ID（为何未召回？）"),
    "recall.run": ("Recall", "召回"),
    "recall.injection": ("Injection text ({tokens} tokens)", "注入文本（{tokens} 个令牌）"),
    "recall.hits": ("Hits", "命中"),
    "recall.none": ("Nothing recalled.", "没有召回任何记忆。"),
    "recall.channels": ("Channels", "通道"),
    "recall.components": ("Score components", "分数组成"),
    "recall.packed": ("packed", "已注入"),
    "recall.not_packed": ("over budget", "超出预算"),
    "recall.degraded": ("Degraded channels: {channels}", "降级的通道：{channels}"),
    "recall.reranked": ("The cross-encoder reranked the best hits.", "交叉编码器对最佳命中进行了重排序。"),
    "recall.not_reranked": (
        "No rerank (no cross-encoder on the inference tier).",
        "未重排序（推理层没有交叉编码器）。",
    ),
    "recall.time_range": ("Time range applied: {range}", "应用的时间范围：{range}"),
    "recall.weights": ("Profile {profile}; weights: {weights}", "配置 {profile}；权重：{weights}"),
    "recall.candidates": ("Channel candidates", "各通道候选"),
    "recall.channel_row": (
        "{channel}: {count} candidates in {ms} ms",
        "{channel}：{count} 个候选，用时 {ms} 毫秒",
    ),
    "recall.channel_error": ("{channel} did not answer: {error}", "{channel} 未响应：{error}"),
    "recall.fusion": (
        "Fusion joins the channels' ranks (reciprocal rank); rerank rescored the best; "
        "the final score orders the hits.",
        "融合合并各通道的排名（倒数排名融合）；重排序为最佳命中重新打分；最终分数决定顺序。",
    ),
    "why.title": ("Why not {id}?", "为什么没有召回 {id}？"),
    "why.returned": (
        "It was returned, at position {position} (final score {score}).",
        "它被召回了，排在第 {position} 位（最终分数 {score}）。",
    ),
    "why.not_packed": (
        "It was returned but not packed into the injection text: the token budget was spent.",
        "它被召回了，但未注入文本：令牌预算已用完。",
    ),
    "why.missing": ("No memory {id} is visible to this key.", "此密钥看不到记忆 {id}。"),
    "why.status": (
        "Its status is {status}: recall uses active memories only.",
        "它的状态是 {status}：召回只使用有效记忆。",
    ),
    "why.subject": (
        "It belongs to subject {subject}, the recall asked for {asked}.",
        "它属于主体 {subject}，而召回指定的是 {asked}。",
    ),
    "why.channels_found": ("Found by: {channels}.", "找到它的通道：{channels}。"),
    "why.channels_missed": ("Missed by: {channels}.", "没有找到它的通道：{channels}。"),
    "why.no_channel": (
        "No channel returned it as a candidate: its words and meaning are too far from the query.",
        "没有任何通道把它作为候选：它的用词和含义与查询相距太远。",
    ),
    "why.top_k": (
        "It ranked {position} after fusion and scoring, below the top {top_k} returned.",
        "融合与打分后它排在第 {position} 位，在返回的前 {top_k} 条之外。",
    ),
    "why.threshold": (
        "Its final score {score} is below the score threshold: the lowest returned scored {lowest}.",
        "它的最终分数 {score} 低于分数阈值：返回的最低分为 {lowest}。",
    ),
    "why.threshold_none": (
        "Its final score {score} is below the score threshold (nothing passed it).",
        "它的最终分数 {score} 低于分数阈值（没有记忆超过阈值）。",
    ),
    "why.dropped": (
        "Channels found it but fusion kept more candidates above it than it examines.",
        "通道找到了它，但融合保留的候选中有更多排在它之前。",
    ),
    "pending.title": ("Pending memories", "待确认的记忆"),
    "pending.help": (
        "Low-confidence memories wait here; recall does not use them until confirmed.",
        "低置信度的记忆在此等待；确认之前召回不会使用它们。",
    ),
    "pending.none": ("Nothing is pending.", "没有待确认的记忆。"),
    "pending.confirm": ("Confirm", "确认"),
    "pending.reject": ("Reject", "拒绝"),
    "pending.confirm_selected": ("Confirm selected", "确认所选"),
    "pending.reject_selected": ("Reject selected", "拒绝所选"),
    "pending.select_all": ("Select all", "全选"),
    "pending.done": ("{count} confirmed, {rejected} rejected.", "已确认 {count} 条，已拒绝 {rejected} 条。"),
    "pending.failed": ("{id}: {reason}", "{id}：{reason}"),
    "pending.nothing": ("Select at least one memory.", "请至少选择一条记忆。"),
    "erasure.title": ("Erasure", "擦除"),
    "erasure.subject_title": ("Erase a subject", "擦除主体"),
    "erasure.help": (
        "Erases every memory, session and turn of the subject, with their versions and what was derived "
        "from them. It cannot be undone.",
        "擦除该主体的全部记忆、会话和对话轮次，包括其版本和派生内容。此操作不可撤销。",
    ),
    "erasure.subject": ("Subject to erase", "要擦除的主体"),
    "erasure.confirm": ("Type the subject's name again to confirm", "再次输入主体名称以确认"),
    "erasure.reason": ("Reason (kept in the audit record)", "原因（记入审计记录）"),
    "erasure.submit": ("Erase", "擦除"),
    "erasure.mismatch": (
        "confirmation: type the subject's name exactly ({subject}).",
        "确认：请准确输入主体名称（{subject}）。",
    ),
    "erasure.memories_title": ("Erase memories", "擦除记忆"),
    "erasure.ids": ("Memory ids (separated by spaces or commas)", "记忆 ID（以空格或逗号分隔）"),
    "erasure.confirm_count": ("Type how many memories to confirm", "输入记忆的条数以确认"),
    "erasure.mismatch_count": (
        "type the number of memories to erase ({count}).",
        "请输入要擦除的记忆条数（{count}）。",
    ),
    "erasure.scope_memories": ("{count} memories", "{count} 条记忆"),
    "erasure.confirm_memories": (
        "Erase these memories? This cannot be undone.",
        "确定擦除这些记忆？此操作不可撤销。",
    ),
    "erasure.this_memory": ("Erase this memory", "擦除这条记忆"),
    "erasure.scope": ("Erased", "擦除范围"),
    "erasure.done": ("Erased", "已擦除"),
    "erasure.audit": ("Audit record {id}", "审计记录 {id}"),
    "erasure.counts": (
        "{memories} memories, {sessions} sessions, {turns} turns, {replies} kept replies, at {at}",
        "{memories} 条记忆、{sessions} 个会话、{turns} 个轮次、{replies} 条保留的回复，时间 {at}",
    ),
    "erasure.verified": (
        "Checked afterwards: the subject has {left} memories left.",
        "事后核对：该主体剩余 {left} 条记忆。",
    ),
    "erasure.verified_memories": (
        "Checked afterwards: {left} of them can still be read.",
        "事后核对：其中仍可读取 {left} 条。",
    ),
    "erasure.recent": ("Erasures made from this console", "本控制台执行的擦除"),
    "erasure.recent_none": ("None yet.", "暂无。"),
    "erasure.confirm_dialog": (
        "Erase subject {subject}? This cannot be undone.",
        "确定擦除主体 {subject}？此操作不可撤销。",
    ),
    "ops.title": ("Operations", "运行状态"),
    "ops.servers": ("Servers", "服务器"),
    "ops.unavailable": ("{target}: {reason}", "{target}：{reason}"),
    "ops.recall": ("Recall latency", "召回延迟"),
    "ops.target": ("target p99 {target} ms", "目标 p99 {target} 毫秒"),
    "ops.met": ("met", "达标"),
    "ops.missed": ("MISSED", "未达标"),
    "ops.no_recall": ("no recall in the window", "窗口内没有召回"),
    "ops.over_time": (
        "p50 / p95 / p99 over the console's samples (ms)",
        "控制台采样中的 p50 / p95 / p99（毫秒）",
    ),
    "ops.stages": ("Per stage, p99 (ms)", "各阶段 p99（毫秒）"),
    "ops.inference": ("Inference tier", "推理层"),
    "ops.backlog": ("Embedding backlog", "嵌入积压"),
    "ops.backlog_value": ("{pending} memories waiting for an embedding", "{pending} 条记忆等待嵌入"),
    "ops.backlog_unknown": ("not counted yet", "尚未统计"),
    "ops.pool": ("Connection pool", "连接池"),
    "ops.pool_value": (
        "{in_use} in use, {idle} idle of {size} (max {max})",
        "使用中 {in_use}，空闲 {idle}，共 {size}（上限 {max}）",
    ),
    "ops.replicas": ("Replicas", "副本"),
    "ops.replicas_none": ("No read replica: reads go to the primary.", "没有只读副本：读取走主库。"),
    "ops.replica_row": ("{name}: {state}, lag {lag}", "{name}：{state}，延迟 {lag}"),
    "ops.jobs": ("Jobs and metrics", "任务与指标"),
    "ops.metrics_off": ("No metrics endpoint configured (metrics_url).", "未配置指标端点（metrics_url）。"),
    "ops.metrics_error": ("Metrics at {url} could not be read: {reason}", "无法读取 {url} 的指标：{reason}"),
    "ops.refresh": ("Refresh", "刷新"),
    "ops.uptime": (
        "pid {pid}, up {uptime} s, window {window} s",
        "进程 {pid}，已运行 {uptime} 秒，窗口 {window} 秒",
    ),
    "ops.serving": ("health {serving}, inference {inference}", "健康 {serving}，推理 {inference}"),
    "enum.any": ("any", "全部"),
}


def negotiate(accept_language: str) -> Language:
    """Chinese when a zh* language has a higher quality than every English one (or English is absent);
    otherwise English. Malformed entries are skipped, never an error."""
    best: dict[Language, float] = {}
    for index, part in enumerate(accept_language[:MAX_ACCEPT_LANGUAGE].split(",")[:32]):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                continue
        tag = tag.strip().lower()
        language: Language | None = "zh" if tag.startswith("zh") else "en" if tag.startswith("en") else None
        if language is not None and quality > 0:
            # Earlier entries win ties, as browsers list preferences in order.
            best[language] = max(best.get(language, -1.0), quality - index * 1e-6)
    if "zh" in best and best["zh"] > best.get("en", -1.0):
        return "zh"
    return "en"


def translate(language: Language, key: str, **values: object) -> str:
    english, chinese = CATALOGUE[key]
    text = chinese if language == "zh" else english
    return text.format(**values) if values else text
