"""An IT helpdesk: employees, their devices and support tickets. Reserved for evaluation in the
demo: no training data is made here, so evaluation measures transfer to tools never trained on."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.base import Environment, ToolError, generates, snapshot, writes
from agentune.tasks.environments.blueprints import PEOPLE

EMPLOYEES = [
    {"employee_id": "E01", "name": "陈静", "department": "财务 Finance", "locked": False},
    {"employee_id": "E02", "name": "Noah Kim", "department": "Sales", "locked": True},
    {"employee_id": "E03", "name": "刘洋", "department": "研发 R&D", "locked": False},
]
DEVICES = [
    {"device_id": "LT-2041", "employee_id": "E01", "model": "ThinkPad X1", "status": "in use"},
    {"device_id": "LT-2042", "employee_id": "E02", "model": "MacBook Air", "status": "in repair"},
    {"device_id": "LT-2043", "employee_id": "E03", "model": "Dell XPS 13", "status": "in use"},
]
TICKETS = [
    {"ticket_id": "T-301", "employee_id": "E02", "title": "Laptop screen flickers",
     "priority": "high", "status": "open", "assignee": None},
    {"ticket_id": "T-302", "employee_id": "E01", "title": "VPN 连不上", "priority": "normal",
     "status": "open", "assignee": "赵工"},
]
ENGINEERS = ("赵工", "Maria Lopez", "孙磊")
DEPARTMENTS = ("财务 Finance", "Sales", "研发 R&D", "市场 Marketing", "HR", "法务 Legal")
MODELS = ("ThinkPad X1", "MacBook Air", "Dell XPS 13", "MacBook Pro", "Surface Laptop",
          "HP EliteBook")
PROBLEMS = ("Laptop screen flickers", "VPN 连不上", "打印机无法连接", "Outlook keeps crashing",
            "键盘失灵", "Cannot join Wi-Fi", "邮箱满了", "Docking station not detected")


class Helpdesk(Environment):
    name = "helpdesk"
    description = {"en": "An IT helpdesk: employees, devices and support tickets.",
                   "zh": "IT 服务台：员工、设备和工单。"}

    def reset(self, **state: Any) -> None:
        self.employees = snapshot(state.get("employees", EMPLOYEES))
        self.devices = snapshot(state.get("devices", DEVICES))
        self.tickets = snapshot(state.get("tickets", TICKETS))
        self.next_ticket = state.get("next_ticket", 303)

    def state(self) -> dict[str, Any]:
        return snapshot({"employees": self.employees, "devices": self.devices,
                              "tickets": self.tickets, "next_ticket": self.next_ticket})

    @classmethod
    def sample_state(cls, rng: random.Random) -> dict[str, Any]:
        """A new company: 4-6 employees (some locked out), a device or two each, open and
        closed tickets."""
        employees, devices = [], []
        for i, name in enumerate(rng.sample(PEOPLE, rng.randint(4, 6))):
            employee_id = f"E{rng.randint(1, 8)}{i}"
            employees.append({"employee_id": employee_id, "name": name,
                              "department": rng.choice(DEPARTMENTS), "locked": rng.random() < 0.3})
            for _ in range(rng.randint(1, 2)):
                devices.append({"device_id": f"LT-{rng.randint(1000, 9999)}{len(devices)}",
                                "employee_id": employee_id, "model": rng.choice(MODELS),
                                "status": rng.choice(("in use", "in use", "in repair"))})
        next_ticket = rng.randint(100, 900)
        tickets = []
        for problem in rng.sample(PROBLEMS, rng.randint(2, 5)):
            tickets.append({"ticket_id": f"T-{next_ticket}",
                            "employee_id": rng.choice(employees)["employee_id"], "title": problem,
                            "priority": rng.choice(("low", "normal", "high")),
                            "status": rng.choice(("open", "open", "closed")),
                            "assignee": rng.choice((None, *ENGINEERS))})
            next_ticket += 1
        return {"employees": employees, "devices": devices, "tickets": tickets,
                "next_ticket": next_ticket}

    def find_employee(self, name: str) -> list[dict]:
        """Find employees by name. 按姓名查找员工。

        Args:
            name: The employee's name or part of it.
        """
        q = name.strip().lower()
        return [e for e in self.employees if q and q in e["name"].lower()]

    def list_devices(self, employee_id: str) -> list[dict]:
        """List the devices issued to an employee. 列出员工名下的设备。

        Args:
            employee_id: The employee's id, e.g. "E01".
        """
        self._employee(employee_id)
        return [d for d in self.devices if d["employee_id"] == employee_id]

    def list_tickets(self, status: str = "open") -> list[dict]:
        """List support tickets with a status. 列出某状态的工单。

        Args:
            status: "open" or "closed".
        """
        return [t for t in self.tickets if t["status"] == status]

    @generates("tickets.*.ticket_id", "next_ticket")
    def create_ticket(self, employee_id: str, title: str, priority: str = "normal") -> dict:
        """Open a support ticket for an employee. 为员工创建工单。

        Args:
            employee_id: Who the ticket is for.
            title: What is wrong, in a sentence.
            priority: "low", "normal" or "high".
        """
        self._employee(employee_id)
        if priority not in ("low", "normal", "high"):
            raise ToolError(f"priority {priority!r} is not low, normal or high")
        ticket = {"ticket_id": f"T-{self.next_ticket}", "employee_id": employee_id,
                  "title": title, "priority": priority, "status": "open", "assignee": None}
        self.next_ticket += 1
        self.tickets.append(ticket)
        return dict(ticket)

    @writes
    def assign_ticket(self, ticket_id: str, engineer: str) -> dict:
        """Assign a ticket to an engineer. 把工单分派给工程师。

        Args:
            ticket_id: The ticket's id, e.g. "T-301".
            engineer: The engineer's name.
        """
        if engineer not in ENGINEERS:
            raise ToolError(f"no engineer {engineer!r}; engineers: {', '.join(ENGINEERS)}")
        ticket = self._ticket(ticket_id)
        ticket["assignee"] = engineer
        return dict(ticket)

    @writes
    def close_ticket(self, ticket_id: str) -> dict:
        """Close a ticket once its problem is solved. 问题解决后关闭工单。

        Args:
            ticket_id: The ticket's id.
        """
        ticket = self._ticket(ticket_id)
        if ticket["status"] == "closed":
            raise ToolError(f"{ticket_id} is already closed")
        ticket["status"] = "closed"
        return dict(ticket)

    @writes
    def unlock_account(self, employee_id: str) -> dict:
        """Unlock an employee's locked account. 解锁员工被锁定的账号。

        Args:
            employee_id: The employee's id.
        """
        employee = self._employee(employee_id)
        if not employee["locked"]:
            raise ToolError(f"{employee['name']}'s account is not locked")
        employee["locked"] = False
        return {"employee_id": employee_id, "locked": False}

    def _employee(self, employee_id: str) -> dict:
        employee = next((e for e in self.employees if e["employee_id"] == employee_id), None)
        if employee is None:
            raise ToolError(f"no employee {employee_id}")
        return employee

    def _ticket(self, ticket_id: str) -> dict:
        ticket = next((t for t in self.tickets if t["ticket_id"] == ticket_id), None)
        if ticket is None:
            raise ToolError(f"no ticket {ticket_id}")
        return ticket
