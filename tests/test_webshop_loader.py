"""Loading WebShop-format files (items_shuffle / items_ins_v2 / items_human_ins) from any folder."""

from __future__ import annotations

import json

import pytest

from paw_gym.webshop.env import WebShopEnv
from paw_gym.webshop.loader import load_official_products


def raw_item(i: int, **kw) -> dict:
    item = {"asin": f"B0TEST{i:04d}", "name": f"Acme Trail Running Shoe Model {i}",
            "full_description": "A light shoe.", "small_description": ["Rubber sole"],
            "pricing": f"${20 + i}.50", "images": ["x.jpg"],
            "product_category": "Clothing, Shoes & Jewelry › Men › Shoes › Running",
            "category": "fashion", "query": "Men's Running Shoes", "page": 1,
            "average_rating": "", "customization_options": {
                "Color": [{"value": "Black/Red", "image": None}, {"value": "Blue"}],
                "Size": [{"value": "9"}, {"value": "10"}]}}
    item.update(kw)
    return item


@pytest.fixture
def data_dir(tmp_path):
    items = [raw_item(i) for i in range(30)]
    items.append(raw_item(3))  # duplicate ASIN: skipped
    items.append(raw_item(99, asin="nan"))  # malformed ASIN: skipped
    labels = {f"B0TEST{i:04d}": {"attributes": ["rubber sole", "lace up"],
                                 "instruction": f"Find me lace up men's running shoes {i}",
                                 "instruction_attributes": ["rubber sole"]}
              for i in range(0, 30, 2)}
    human = {"B0TEST0001": [{"instruction": "i want blue running shoes with a rubber sole.",
                             "instruction_attributes": ["rubber sole"],
                             "instruction_options": ["blue", "10"]},
                            {"instruction": "no attributes here", "instruction_attributes": [],
                             "instruction_options": []}]}
    (tmp_path / "items_shuffle.json").write_text(json.dumps(items))
    (tmp_path / "items_ins_v2.json").write_text(json.dumps(labels))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    return tmp_path


def test_loader_normalises_like_webshop(data_dir):
    products, source = load_official_products(data_dir)
    assert len(products) == 30 and "items_shuffle.json" in source
    first = products[0]
    assert first.options == {"color": ["black | red", "blue"], "size": ["9", "10"]}
    assert first.query == "men's running shoes" and first.rating == "N.A."
    assert first.pricing == [20.5] and first.price_tag == "$20.5"
    assert products[1].attributes == ["DUMMY_ATTR"]  # no labels for odd products
    assert load_official_products(data_dir, num_products=5)[0] == products[:5]


def test_synthetic_and_human_goals_from_files(data_dir):
    env = WebShopEnv(split="all", data_dir=data_dir, cache_dir=False)
    assert len(env.goals) == 15 * 4  # 15 instructed products x (2 colours x 2 sizes)
    human = WebShopEnv(split="all", data_dir=data_dir, goal_source="human", cache_dir=False)
    assert len(human.goals) == 1  # the goal without attributes is skipped, as in WebShop
    goal = human.goals[0]
    assert goal.instruction_text.startswith("i want blue running shoes with a rubber sole")
    assert "." not in goal.instruction_text.split(",")[0]  # trailing period stripped
    human.reset(options={"goal_index": 0})
    for _ in range(15):
        obs, reward, terminated, truncated, info = human.step(human.expert_action())
        if terminated:
            break
    assert info["won"] and info["purchased_options"] == {"color": "blue", "size": "10"}


def test_bad_files_give_clear_errors(tmp_path):
    (tmp_path / "items_shuffle.json").write_text("{not json")
    (tmp_path / "items_ins_v2.json").write_text("{}")
    with pytest.raises(ValueError, match="malformed WebShop data file"):
        load_official_products(tmp_path)
    with pytest.raises(ValueError, match="goal_source"):
        WebShopEnv(data_dir=tmp_path, goal_source="robot")
    (tmp_path / "items_shuffle.json").write_text('[{"asin": "B0000000AA"}, "not an item"]')
    with pytest.raises(ValueError, match=r"items_shuffle.json item 1 is str, expected a "
                                         r"product object"):
        load_official_products(tmp_path)
    (tmp_path / "items_shuffle.json").write_text("[]")
    (tmp_path / "items_ins_v2.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="items_ins_v2.json must hold a JSON object keyed by ASIN"):
        load_official_products(tmp_path)
