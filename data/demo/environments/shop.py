"""An online shop's customers, products and orders (customer-service work)."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.base import Environment, ToolError, generates, snapshot, writes
from agentune.tasks.environments.blueprints import PEOPLE

CUSTOMERS = [
    {"customer_id": "C001", "name": "王芳", "email": "wang.fang@example.com",
     "phone": "13800000001", "address": "上海市徐汇区漕溪北路 88 号", "tier": "gold"},
    {"customer_id": "C002", "name": "Liam Carter", "email": "liam.carter@example.com",
     "phone": "13800000002", "address": "12 Harbour Road, Shenzhen", "tier": "standard"},
    {"customer_id": "C003", "name": "张伟", "email": "zhang.wei@example.com",
     "phone": "13800000003", "address": "北京市海淀区中关村大街 1 号", "tier": "standard"},
]
PRODUCTS = [
    {"sku": "SKU-KB01", "name": "Mechanical keyboard 机械键盘", "price": 399, "stock": 12},
    {"sku": "SKU-MS02", "name": "Wireless mouse 无线鼠标", "price": 129, "stock": 30},
    {"sku": "SKU-HP03", "name": "Noise-cancelling headphones 降噪耳机", "price": 1299,
     "stock": 3},
    {"sku": "SKU-MN04", "name": "27-inch monitor 27寸显示器", "price": 1899, "stock": 0},
]
ORDERS = [
    {"order_id": "O-1001", "customer_id": "C001", "sku": "SKU-HP03", "quantity": 1,
     "total": 1299, "status": "shipped", "tracking": "SF123456789"},
    {"order_id": "O-1002", "customer_id": "C001", "sku": "SKU-MS02", "quantity": 2,
     "total": 258, "status": "paid", "tracking": None},
    {"order_id": "O-1003", "customer_id": "C002", "sku": "SKU-KB01", "quantity": 1,
     "total": 399, "status": "paid", "tracking": None},
]


CATALOG = [("Mechanical keyboard", "机械键盘", 399), ("Wireless mouse", "无线鼠标", 129),
           ("Noise-cancelling headphones", "降噪耳机", 1299), ("27-inch monitor", "27寸显示器", 1899),
           ("HD webcam", "高清摄像头", 299), ("Bluetooth speaker", "蓝牙音箱", 259),
           ("Fast charger", "快充充电器", 99), ("Tablet", "平板电脑", 2599),
           ("Laptop backpack", "双肩背包", 199), ("Smartwatch", "智能手表", 1499),
           ("Wi-Fi router", "无线路由器", 349), ("Power bank", "充电宝", 159)]
"""Products a sampled shop may sell: English name, Chinese name, list price."""
STREETS = ("上海市浦东新区世纪大道 {n} 号", "北京市朝阳区建国路 {n} 号", "广州市天河区体育西路 {n} 号",
           "{n} Harbour Road, Shenzhen", "{n} Nanjing Road West, Shanghai",
           "成都市武侯区人民南路 {n} 号", "杭州市西湖区文三路 {n} 号")


class Shop(Environment):
    name = "shop"
    description = {"en": "An online shop's customers, products and orders.",
                   "zh": "网店的客户、商品和订单。"}

    def reset(self, **state: Any) -> None:
        self.customers = snapshot(state.get("customers", CUSTOMERS))
        self.products = snapshot(state.get("products", PRODUCTS))
        self.orders = snapshot(state.get("orders", ORDERS))
        self.next_order = state.get("next_order", 1004)

    def state(self) -> dict[str, Any]:
        return snapshot({"customers": self.customers, "products": self.products,
                              "orders": self.orders, "next_order": self.next_order})

    @classmethod
    def sample_state(cls, rng: random.Random) -> dict[str, Any]:
        """A new shop: 4-6 customers, 6-8 products (prices and stock drawn), and orders paid,
        shipped or delivered."""
        customers = []
        for i, name in enumerate(rng.sample(PEOPLE, rng.randint(4, 6))):
            number = rng.randint(100, 989)
            slug = name.lower().replace(" ", ".") if name.isascii() else f"customer{number}"
            customers.append({"customer_id": f"C{number:03d}{i}", "name": name,
                              "email": f"{slug}@example.com",
                              "phone": f"13{rng.randint(100000000, 999999999)}",
                              "address": rng.choice(STREETS).format(n=rng.randint(1, 300)),
                              "tier": rng.choice(("gold", "standard", "standard"))})
        products = []
        for i, (en, zh, price) in enumerate(rng.sample(CATALOG, rng.randint(6, 8))):
            products.append({"sku": f"SKU-{en[:2].upper()}{rng.randint(1, 9)}{i}",
                              "name": f"{en} {zh}", "price": round(price * rng.uniform(0.7, 1.3)),
                              "stock": rng.choice((0, 2, 5, 12, 30))})
        next_order = rng.randint(1100, 8800)
        orders = []
        for _ in range(rng.randint(4, 8)):
            product, customer = rng.choice(products), rng.choice(customers)
            quantity = rng.randint(1, 3)
            status = rng.choice(("paid", "paid", "shipped", "delivered"))
            orders.append({"order_id": f"O-{next_order}", "customer_id": customer["customer_id"],
                           "sku": product["sku"], "quantity": quantity,
                           "total": product["price"] * quantity, "status": status,
                           "tracking": f"SF{rng.randint(10**8, 10**9 - 1)}"
                           if status != "paid" else None})
            next_order += 1
        return {"customers": customers, "products": products, "orders": orders,
                "next_order": next_order}

    def find_customer(self, query: str) -> list[dict]:
        """Find customers by name, e-mail or phone number. 按姓名、邮箱或手机号查找客户。

        Args:
            query: A name, an e-mail address or a phone number.
        """
        q = query.strip().lower()
        return [c for c in self.customers
                if q and (q in c["name"].lower() or q == c["email"] or q == c["phone"])]

    def get_order(self, order_id: str) -> dict:
        """Get an order's items, total, status and tracking number. 查询订单的商品、金额、状态和物流单号。

        Args:
            order_id: The order's id, e.g. "O-1001".
        """
        return dict(self._order(order_id))

    def list_orders(self, customer_id: str) -> list[dict]:
        """List a customer's orders. 列出某位客户的全部订单。

        Args:
            customer_id: The customer's id, e.g. "C001".
        """
        self._customer(customer_id)
        return [o for o in self.orders if o["customer_id"] == customer_id]

    def search_products(self, keyword: str) -> list[dict]:
        """Search the catalog for products with their price and stock. 搜索商品及其价格和库存。

        Args:
            keyword: A word of the product's name, in English or Chinese.
        """
        k = keyword.strip().lower()
        return [p for p in self.products if k and k in p["name"].lower()]

    @generates("orders.*.order_id", "next_order")
    def create_order(self, customer_id: str, sku: str, quantity: int) -> dict:
        """Place an order for a customer and take the items from stock. 为客户下单并扣减库存。

        Args:
            customer_id: The customer's id.
            sku: The product's SKU, e.g. "SKU-MS02".
            quantity: How many, at least 1.
        """
        self._customer(customer_id)
        product = next((p for p in self.products if p["sku"] == sku), None)
        if product is None:
            raise ToolError(f"no product {sku}")
        if quantity < 1:
            raise ToolError("quantity must be at least 1")
        if product["stock"] < quantity:
            raise ToolError(f"only {product['stock']} of {sku} in stock")
        product["stock"] -= quantity
        order = {"order_id": f"O-{self.next_order}", "customer_id": customer_id, "sku": sku,
                 "quantity": quantity, "total": product["price"] * quantity, "status": "paid",
                 "tracking": None}
        self.next_order += 1
        self.orders.append(order)
        return dict(order)

    @writes
    def cancel_order(self, order_id: str) -> dict:
        """Cancel an order that has not shipped and refund it. 取消尚未发货的订单并退款。

        Args:
            order_id: The order's id.
        """
        order = self._order(order_id)
        if order["status"] != "paid":
            raise ToolError(f"order {order_id} is {order['status']} and cannot be cancelled")
        order["status"] = "cancelled"
        for product in self.products:
            if product["sku"] == order["sku"]:
                product["stock"] += order["quantity"]
        return {"order_id": order_id, "status": "cancelled", "refund": order["total"]}

    @writes
    def update_shipping_address(self, customer_id: str, address: str) -> dict:
        """Change the address a customer's orders ship to. 修改客户的收货地址。

        Args:
            customer_id: The customer's id.
            address: The new full address.
        """
        customer = self._customer(customer_id)
        if not address.strip():
            raise ToolError("the address is empty")
        customer["address"] = address.strip()
        return {"customer_id": customer_id, "address": customer["address"]}

    def _customer(self, customer_id: str) -> dict:
        customer = next((c for c in self.customers if c["customer_id"] == customer_id), None)
        if customer is None:
            raise ToolError(f"no customer {customer_id}")
        return customer

    def _order(self, order_id: str) -> dict:
        order = next((o for o in self.orders if o["order_id"] == order_id), None)
        if order is None:
            raise ToolError(f"no order {order_id}")
        return order
