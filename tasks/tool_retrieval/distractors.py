"""Distractor tools that grow a catalog to thousands: plausible bilingual tools (an action on an
object in a business domain) that no scenario needs. Many share words with real tools
("flight crew", "hotel invoice", "order return"), so they are hard for word matching too.
Deterministic for a seed; names never clash with the catalog's."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentune.tasks.tools.catalog import ToolSpec

# (english verb, chinese verb, parameter it takes)
_ACTIONS = (
    ("search", "搜索", "query"), ("list", "列出", "filter"), ("get", "获取", "id"),
    ("create", "创建", "details"), ("update", "更新", "id"), ("cancel", "取消", "id"),
    ("delete", "删除", "id"), ("book", "预订", "date"), ("check", "检查", "id"),
    ("export", "导出", "date"), ("approve", "审批", "id"), ("archive", "归档", "id"),
    ("assign", "分配", "assignee"), ("count", "统计", "date"), ("schedule", "安排", "date"),
    ("renew", "续订", "id"), ("track", "跟踪", "id"), ("compare", "比较", "query"),
)
# (english object, chinese object)
_OBJECTS = (
    ("flight crew roster", "机组排班"), ("hotel invoice", "酒店发票"),
    ("train maintenance record", "列车检修记录"), ("order return", "退货单"),
    ("meeting minutes", "会议纪要"), ("weather alert", "天气预警"), ("parking space", "停车位"),
    ("expense report", "报销单"), ("payroll slip", "工资单"), ("warehouse stock", "仓库库存"),
    ("freight shipment", "货运单"), ("company vehicle", "公司车辆"), ("sales contract", "销售合同"),
    ("patent filing", "专利申请"), ("recipe", "菜谱"), ("gym class", "健身课程"),
    ("library book", "图书馆藏书"), ("exam score", "考试成绩"), ("insurance claim", "保险理赔"),
    ("loan application", "贷款申请"), ("customer feedback", "客户反馈"),
    ("product review", "商品评价"), ("coupon", "优惠券"), ("gift card", "礼品卡"),
    ("subscription plan", "订阅套餐"), ("server log", "服务器日志"),
    ("database backup", "数据库备份"), ("employee badge", "员工工牌"), ("visitor pass", "访客证"),
    ("conference venue", "会议场地"), ("bus route", "公交线路"), ("taxi ride", "出租车行程"),
    ("flight delay notice", "航班延误通知"), ("visa application", "签证申请"),
    ("exchange rate history", "汇率历史"), ("stock dividend", "股票分红"),
    ("news article", "新闻文章"), ("podcast episode", "播客节目"), ("movie ticket", "电影票"),
    ("concert ticket", "演唱会门票"), ("restaurant review", "餐厅点评"),
    ("doctor appointment", "门诊预约"), ("prescription", "处方"), ("pet vaccination", "宠物疫苗"),
    ("electricity bill", "电费账单"), ("parcel delivery", "快递包裹"), ("training course", "培训课程"),
    ("calendar holiday", "节假日安排"), ("room cleaning", "客房清洁"), ("car rental", "租车订单"),
    ("luggage claim", "行李认领"), ("travel insurance", "旅行保险"), ("tax return", "纳税申报"),
    ("job posting", "招聘职位"), ("candidate interview", "候选人面试"), ("sprint task", "迭代任务"),
    ("code review", "代码评审"), ("marketing campaign", "营销活动"), ("survey response", "问卷回复"),
    ("inventory audit", "库存盘点"),
)
# (english domain, chinese domain)
_DOMAINS = (
    ("hr", "人事"), ("finance", "财务"), ("logistics", "物流"), ("campus", "校园"),
    ("hospital", "医院"), ("retail", "零售"), ("city", "城市服务"), ("airline", "航空公司"),
    ("hotel_group", "酒店集团"), ("factory", "工厂"), ("bank", "银行"), ("media", "媒体"),
)
_PARAMS = {
    "query": ("string", "Keywords to search for."), "filter": ("string", "Only items matching it."),
    "id": ("string", "The item's id."), "details": ("object", "The fields of the new item."),
    "date": ("string", "The day, YYYY-MM-DD."), "assignee": ("string", "Who takes it."),
}
CAPACITY = len(_ACTIONS) * len(_OBJECTS) * len(_DOMAINS)


def _tool(action: tuple[str, str, str], obj: tuple[str, str], domain: tuple[str, str]
          ) -> ToolSpec:
    verb, verb_zh, param = action
    noun, noun_zh = obj
    area, area_zh = domain
    kind, text = _PARAMS[param]
    name = f"{area}_{verb}_{noun.replace(' ', '_')}"
    description = (f"{verb.capitalize()} {noun} records in the {area.replace('_', ' ')} system. "
                   f"在{area_zh}系统中{verb_zh}{noun_zh}。")
    return ToolSpec(name, description, {"type": "object",
                                        "properties": {param: {"type": kind, "description": text}},
                                        "required": [param]})


def distractor_tools(count: int, *, seed: int = 0, avoid: Sequence[str] = ()) -> list[ToolSpec]:
    """``count`` distinct distractors, none named as one in ``avoid``."""
    if count > CAPACITY:
        raise ValueError(f"at most {CAPACITY} distractor tools, asked for {count}")
    combos = [(a, o, d) for d in _DOMAINS for a in _ACTIONS for o in _OBJECTS]
    random.Random(f"distractors:{seed}").shuffle(combos)
    taken = set(avoid)
    out = []
    for combo in combos:
        if len(out) == count:
            break
        tool = _tool(*combo)
        if tool.name not in taken:
            taken.add(tool.name)
            out.append(tool)
    return out


def with_distractors(tools: Sequence[ToolSpec], total: int, *, seed: int = 0) -> list[ToolSpec]:
    """The catalog grown to ``total`` tools (unchanged when it already has that many)."""
    extra = max(0, total - len(tools))
    return [*tools, *distractor_tools(extra, seed=seed, avoid=[t.name for t in tools])]
