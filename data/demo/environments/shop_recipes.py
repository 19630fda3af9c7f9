"""Task recipes of the shop environment (tools.yaml: `recipes:`), generated in sampled shops
when `scenarios.generate.enabled` is on. Each `bind` reads the Shop state and returns the slots,
or raises Unbound when this shop has nothing that fits."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.blueprints import Recipe, Text, Unbound, call, choose

KEYWORDS = {"Mechanical keyboard": ("键盘", "keyboard"), "Wireless mouse": ("鼠标", "mouse"),
            "Noise-cancelling headphones": ("耳机", "headphones"),
            "27-inch monitor": ("显示器", "monitor"), "HD webcam": ("摄像头", "webcam"),
            "Bluetooth speaker": ("音箱", "speaker"), "Fast charger": ("充电器", "charger"),
            "Tablet": ("平板", "tablet"), "Laptop backpack": ("背包", "backpack"),
            "Smartwatch": ("手表", "smartwatch"), "Wi-Fi router": ("路由器", "router"),
            "Power bank": ("充电宝", "power bank")}
NEW_ADDRESSES = ("上海市静安区南京西路 {n} 号", "北京市海淀区中关村大街 {n} 号",
                 "深圳市南山区科技园路 {n} 号", "{n} Century Avenue, Shanghai",
                 "{n} Binjiang Road, Hangzhou")


def product_word(product: dict[str, Any]) -> Text:
    """What a request calls a product: 键盘 / keyboard (a word its name contains)."""
    english = next(en for en in KEYWORDS if product["name"].startswith(en))
    return Text(*KEYWORDS[english])


def customer_of(world: dict[str, Any], order: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in world["customers"] if c["customer_id"] == order["customer_id"])


def an_order(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    order = choose(rng, world["orders"], "no orders")
    return {"order": order["order_id"], "status": order["status"], "total": order["total"]}


def two_orders(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    if len(world["orders"]) < 2:
        raise Unbound("fewer than two orders")
    a, b = rng.sample(world["orders"], 2)
    return {"order_a": a["order_id"], "order_b": b["order_id"], "total_a": a["total"],
            "total_b": b["total"]}


def a_product(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    product = choose(rng, world["products"], "no products")
    return {"product": product_word(product), "price": product["price"]}


def customer_with_orders(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    ids = sorted({o["customer_id"] for o in world["orders"]})
    customer_id = choose(rng, ids, "no customer has orders")
    customer = next(c for c in world["customers"] if c["customer_id"] == customer_id)
    first = next(o for o in world["orders"] if o["customer_id"] == customer_id)
    return {"name": customer["name"], "customer": customer_id, "order": first["order_id"]}


def paid_order_to_cancel(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A paid order that is its customer's only order of that product."""
    skus = {p["sku"]: p for p in world["products"]}
    mine = [o for o in world["orders"] if o["status"] == "paid" and sum(
        x["customer_id"] == o["customer_id"] and x["sku"] == o["sku"]
        for x in world["orders"]) == 1]
    order = choose(rng, mine, "no paid order to cancel")
    customer = customer_of(world, order)
    return {"name": customer["name"], "customer": customer["customer_id"],
            "order": order["order_id"], "product": product_word(skus[order["sku"]]),
            "refund": order["total"]}


def new_order(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    stocked = [p for p in world["products"] if p["stock"] >= 2]
    product = choose(rng, stocked, "no product with stock")
    customer = choose(rng, world["customers"], "no customers")
    quantity = rng.randint(1, min(3, product["stock"]))
    return {"name": customer["name"], "customer": customer["customer_id"],
            "product": product_word(product), "sku": product["sku"], "quantity": quantity,
            "total": product["price"] * quantity}


def a_paid_order(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    order = choose(rng, [o for o in world["orders"] if o["status"] == "paid"], "no paid order")
    return {"order": order["order_id"], "refund": order["total"]}


def address_change(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    customer = choose(rng, world["customers"], "no customers")
    return {"name": customer["name"], "customer": customer["customer_id"],
            "address": rng.choice(NEW_ADDRESSES).format(n=rng.randint(1, 500))}


def a_customer(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    customer = choose(rng, world["customers"], "no customers")
    product = choose(rng, world["products"], "no products")
    return {"name": customer["name"], "product": product_word(product),
            "amount": rng.randrange(100, 2000, 50)}


RECIPES = [
    Recipe(
        id="shop.order_status", kind="single_call", bind=an_order,
        calls=[[call("get_order", order_id="{order}")]],
        phrasings={
            "zh": {"order": "查一下订单 {order} 的状态。",
                   "question": "我的订单 {order} 现在到哪一步了？",
                   "story": "订单 {order} 下了好几天了，一直没动静，帮我看看怎么回事。"},
            "en": {"order": "Check the status of order {order}.",
                   "question": "Where is my order {order} at right now?",
                   "story": "I placed order {order} a few days ago and haven't heard anything. "
                            "What's going on with it?"}},
        facts=["{status}"]),
    Recipe(
        id="shop.product_price", kind="single_call", bind=a_product,
        calls=[[call("search_products", keyword="{product}")]],
        phrasings={
            "zh": {"order": "查一下{product}的价格和库存。",
                   "question": "你们店的{product}多少钱？还有货吗？",
                   "story": "想给家里添一个{product}，先看看价格和有没有货。"},
            "en": {"order": "Look up the price and stock of the {product}.",
                   "question": "How much is your {product}, and is it in stock?",
                   "story": "I'm thinking of getting a {product} for home; what does it cost, "
                            "and can I get one now?"}},
        facts=["{price}"]),
    Recipe(
        id="shop.orders_of_customer", kind="multi_step", bind=customer_with_orders,
        calls=[[call("find_customer", query="{name}")],
               [call("list_orders", customer_id="{customer}")]],
        phrasings={
            "zh": {"order": "列出{name}的所有订单。",
                   "question": "{name}在我们这儿下过哪些订单？",
                   "story": "{name}打电话来问自己买过什么，帮忙把订单都查出来。"},
            "en": {"order": "List all orders of {name}.",
                   "question": "What has {name} ordered from us?",
                   "story": "{name} is on the phone asking what they've bought from us; pull up "
                            "their orders."}},
        facts=["{order}"]),
    Recipe(
        id="shop.cancel_product_order", kind="multi_step", bind=paid_order_to_cancel,
        calls=[[call("find_customer", query="{name}")],
               [call("list_orders", customer_id="{customer}")],
               [call("cancel_order", order_id="{order}")]],
        phrasings={
            "zh": {"order": "取消{name}的{product}订单。",
                   "question": "{name}买的{product}还没发货吧？帮他取消掉。",
                   "story": "{name}说{product}不想要了，趁还没发货把那个订单取消了。"},
            "en": {"order": "Cancel {name}'s {product} order.",
                   "question": "{name}'s {product} hasn't shipped yet, has it? Please cancel "
                               "that order.",
                   "story": "{name} changed their mind about the {product}. If it hasn't "
                            "shipped, cancel the order."}},
        facts=["{refund}"]),
    Recipe(
        id="shop.order_for_customer", kind="multi_step", bind=new_order,
        calls=[[call("find_customer", query="{name}"), call("search_products", keyword="{product}")],
               [call("create_order", customer_id="{customer}", sku="{sku}",
                     quantity="{quantity}")]],
        phrasings={
            "zh": {"order": "给{name}下单{quantity}个{product}。",
                   "question": "能帮{name}订{quantity}个{product}吗？",
                   "story": "{name}刚才留言说要{quantity}个{product}，帮忙下个单。"},
            "en": {"order": "Order {quantity} {product}(s) for {name}.",
                   "question": "Could you place an order of {quantity} {product}(s) for {name}?",
                   "story": "{name} left a message asking for {quantity} {product}(s) - please "
                            "put the order in."}},
        facts=["{total}", "{results[1][0][order_id]}"]),
    Recipe(
        id="shop.two_orders", kind="parallel_calls", bind=two_orders,
        calls=[[call("get_order", order_id="{order_a}"), call("get_order", order_id="{order_b}")]],
        phrasings={
            "zh": {"order": "查一下订单 {order_a} 和 {order_b} 的金额。",
                   "question": "{order_a} 和 {order_b} 这两个订单各多少钱？",
                   "story": "对账时发现 {order_a} 和 {order_b} 两笔对不上，把这两个订单调出来看看。"},
            "en": {"order": "Get the totals of orders {order_a} and {order_b}.",
                   "question": "How much were orders {order_a} and {order_b}?",
                   "story": "Orders {order_a} and {order_b} don't match our books; pull both "
                            "up for me."}},
        facts=["{total_a}", "{total_b}"]),
    Recipe(
        id="shop.cancel_asked", kind="missing_info", bind=a_paid_order,
        calls=[[call("cancel_order", order_id="{order}")]],
        phrasings={
            "zh": {"order": "帮我取消订单。", "question": "我的订单能取消吗？",
                   "story": "东西买错了，想把订单退掉。"},
            "en": {"order": "Cancel an order for me, please.", "question": "Can I cancel my order?",
                   "story": "I bought the wrong thing and want to undo the order."}},
        hidden={"zh": "订单号是 {order}。", "en": "It's order {order}."},
        facts=["{refund}"]),
    Recipe(
        id="shop.address_asked", kind="missing_info", bind=address_change,
        calls=[[call("find_customer", query="{name}")],
               [call("update_shipping_address", customer_id="{customer}", address="{address}")]],
        phrasings={
            "zh": {"order": "收货地址要换一下。", "question": "收货地址可以改吗？",
                   "story": "我搬家了，以后的快递要寄到新地址。"},
            "en": {"order": "Update my shipping address.",
                   "question": "Can I change where my orders ship to?",
                   "story": "I've moved, so my parcels need to go somewhere new from now on."}},
        hidden={"zh": "我是{name}，新地址是{address}。",
                "en": "I'm {name}; the new address is {address}."},
        facts=["{address}"]),
    Recipe(
        id="shop.customer_note", kind="no_tool", bind=a_customer,
        phrasings={
            "zh": {"order": "写一句话向{name}道歉，{product}发货晚了。",
                   "question": "怎么礼貌地告诉{name}{product}要晚几天到？",
                   "story": "{name}买的{product}延迟了，我想发条消息安抚一下，帮我拟一段。"},
            "en": {"order": "Write one sentence apologising to {name} for the late {product}.",
                   "question": "How do I politely tell {name} their {product} will be a few "
                               "days late?",
                   "story": "{name}'s {product} is delayed and I want to send a kind note. "
                            "Draft it for me."}}),
    Recipe(
        id="shop.out_of_scope", kind="irrelevant", bind=a_customer,
        phrasings={
            "zh": {"order": "给{name}的银行账户转{amount}元。",
                   "question": "能帮我查一下{name}的信用分吗？",
                   "story": "{name}想用{product}换个别的牌子，帮我去别家店比比价。"},
            "en": {"order": "Transfer {amount} yuan to {name}'s bank account.",
                   "question": "Can you check {name}'s credit score?",
                   "story": "{name} wants to swap the {product} for another brand - go compare "
                            "prices at other stores for me."}}),
]
