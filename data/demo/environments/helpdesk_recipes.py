"""Task recipes of the helpdesk environment (tools.yaml: `recipes:`). The helpdesk is reserved for
evaluation: what is generated here is `split: reserved`, never trained on."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.blueprints import Recipe, Text, Unbound, call, choose

ENGINEERS = ("赵工", "Maria Lopez", "孙磊")
ISSUES = (("打印机无法连接", "Printer won't connect"), ("VPN 连不上", "VPN keeps dropping"),
          ("显示器没有信号", "Monitor shows no signal"))


def open_ticket(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    ticket = choose(rng, [t for t in world["tickets"] if t["status"] == "open"], "no open ticket")
    return {"ticket": ticket["ticket_id"],
            "engineer": rng.choice([e for e in ENGINEERS if e != ticket["assignee"]])}


def locked_employee(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    names = [e["name"] for e in world["employees"]]
    locked = [e for e in world["employees"] if e["locked"]
              and sum(e["name"].lower() in n.lower() for n in names) == 1]
    employee = choose(rng, locked, "nobody is locked out")
    return {"name": employee["name"], "employee": employee["employee_id"]}


def an_employee(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    employee = choose(rng, world["employees"], "no employees")
    return {"name": employee["name"], "employee": employee["employee_id"],
            "issue": Text(*rng.choice(ISSUES)), "priority": rng.choice(("low", "normal", "high"))}


def two_employees(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    owners = sorted({d["employee_id"] for d in world["devices"]})
    if len(owners) < 2:
        raise Unbound("fewer than two employees with devices")
    a, b = rng.sample(owners, 2)
    first = {e: next(d["device_id"] for d in world["devices"] if d["employee_id"] == e)
             for e in (a, b)}
    return {"a": a, "b": b, "device_a": first[a], "device_b": first[b]}


RECIPES = [
    Recipe(
        id="helpdesk.open_tickets", kind="single_call", bind=open_ticket,
        calls=[[call("list_tickets", status="open")]],
        phrasings={"zh": {"order": "把还没关闭的工单都列出来。", "question": "现在还有哪些工单没处理完？"},
                   "en": {"order": "List the open tickets.",
                          "question": "Which support tickets are still open?"}},
        facts=["{ticket}"]),
    Recipe(
        id="helpdesk.assign", kind="single_call", bind=open_ticket,
        calls=[[call("assign_ticket", ticket_id="{ticket}", engineer="{engineer}")]],
        phrasings={"zh": {"order": "把工单 {ticket} 分给{engineer}。",
                          "question": "{ticket} 这个工单能交给{engineer}处理吗？"},
                   "en": {"order": "Assign ticket {ticket} to {engineer}.",
                          "question": "Can {engineer} take ticket {ticket}?"}},
        facts=["{engineer}"]),
    Recipe(
        id="helpdesk.unlock", kind="multi_step", bind=locked_employee,
        calls=[[call("find_employee", name="{name}")],
               [call("unlock_account", employee_id="{employee}")]],
        phrasings={"zh": {"order": "{name}的账号被锁了，帮忙解锁。",
                          "question": "{name}登不上系统了，能把账号解开吗？"},
                   "en": {"order": "Unlock {name}'s account.",
                          "question": "{name} is locked out - can you unlock the account?"}},
        facts=["{name}"]),
    Recipe(
        id="helpdesk.ticket_for", kind="multi_step", bind=an_employee,
        calls=[[call("find_employee", name="{name}")],
               [call("create_ticket", employee_id="{employee}", title="{issue}",
                     priority="{priority}")]],
        phrasings={"zh": {"order": "给{name}开一个{priority}优先级的工单，标题“{issue}”。",
                          "question": "{name}反映“{issue}”，能开个工单吗？优先级{priority}。"},
                   "en": {"order": "Open a {priority}-priority ticket for {name}: \"{issue}\".",
                          "question": "{name} reports \"{issue}\". Could you file a ticket, "
                                      "{priority} priority?"}},
        facts=["{results[1][0][ticket_id]}"]),
    Recipe(
        id="helpdesk.devices_of_two", kind="parallel_calls", bind=two_employees,
        calls=[[call("list_devices", employee_id="{a}"), call("list_devices", employee_id="{b}")]],
        phrasings={"zh": {"order": "查一下员工 {a} 和 {b} 名下的设备。",
                          "question": "{a} 和 {b} 这两位员工各领了什么设备？"},
                   "en": {"order": "List the devices of employees {a} and {b}.",
                          "question": "Which devices do employees {a} and {b} have?"}},
        facts=["{device_a}", "{device_b}"]),
    Recipe(
        id="helpdesk.unlock_asked", kind="missing_info", bind=locked_employee,
        calls=[[call("find_employee", name="{name}")],
               [call("unlock_account", employee_id="{employee}")]],
        phrasings={"zh": {"order": "我的账号被锁了，帮忙处理一下。", "question": "我的账号能解锁吗？"},
                   "en": {"order": "Please unlock my account.",
                          "question": "Can you unlock my account?"}},
        hidden={"zh": "我是{name}。", "en": "I'm {name}."},
        facts=["{name}"]),
    Recipe(
        id="helpdesk.advice", kind="no_tool", bind=an_employee,
        phrasings={"zh": {"order": "教我设置一个安全的密码。", "question": "“{issue}”一般是什么原因？"},
                   "en": {"order": "Tell me how to pick a strong password.",
                          "question": "What usually causes \"{issue}\"?"}}),
    Recipe(
        id="helpdesk.out_of_scope", kind="irrelevant", bind=an_employee,
        phrasings={"zh": {"order": "帮{name}订一张下周去东京的机票。",
                          "question": "能帮{name}申请加薪吗？"},
                   "en": {"order": "Book {name} a flight to Tokyo next week.",
                          "question": "Can you file a pay rise request for {name}?"}}),
]
