"""Loading WebShop's official data files into :class:`~paw_gym.webshop.catalog.Product`.

WebShop releases its catalog as ``items_shuffle*.json`` (raw scraped products) plus
``items_ins_v2*.json`` (attribute labels and synthetic instructions per ASIN) and, for human
goals, ``items_human_ins.json``. The conversion follows WebShop's ``load_products``: products
are taken in file order (the file is pre-shuffled, so the first ``n`` are the "n-product"
catalog), duplicate or malformed ASINs are skipped, prices are parsed from strings such as
``$19.99 - $27.99``, option values are lowercased with ``/`` shown as `` | ``, and products
without attribute labels get ``['DUMMY_ATTR']``.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from paw_gym.webshop.catalog import Product

#: Environment variable naming a directory with WebShop's official data files.
DATA_ENV_VAR = "PAW_WEBSHOP_DATA"
_NOT_PRICE = re.compile(r"[^\d.]")


def parse_pricing(pricing: Any) -> list[float]:
    """WebShop's price parsing: ``''`` -> ``[100.0]``; ``'$a - $b'`` -> ``[a, b]``."""
    if not pricing or not isinstance(pricing, str):
        return [100.0]
    values = []
    for part in pricing.split("$")[1:]:
        try:
            values.append(float(Decimal(_NOT_PRICE.sub("", part))))
        except InvalidOperation:
            continue
    return values[:2] if values else [100.0]


def parse_options(customization_options: Any) -> dict[str, list[str]]:
    """``{Name: [{value: …}, …]}`` -> ``{name: [value, …]}`` in WebShop's normal form."""
    options: dict[str, list[str]] = {}
    if not isinstance(customization_options, dict):
        return options
    for name, contents in customization_options.items():
        if contents is None:
            continue
        options[name.lower()] = [str(c["value"]).strip().replace("/", " | ").lower()
                                 for c in contents]
    return options


def product_from_raw(raw: dict[str, Any], labels: dict[str, Any] | None,
                     human: list[dict] | None = None) -> Product:
    """Convert one raw ``items_shuffle`` entry (plus its ``items_ins_v2`` labels)."""
    bullets = raw.get("small_description") or []
    if not isinstance(bullets, list):
        bullets = [bullets]
    labels = labels or {}
    rating = raw.get("average_rating")
    return Product(
        asin=raw["asin"],
        title=raw.get("name") or "",
        description=raw.get("full_description") or "",
        bullets=[str(b) for b in bullets],
        pricing=parse_pricing(raw.get("pricing")),
        options=parse_options(raw.get("customization_options")),
        attributes=list(labels.get("attributes") or ["DUMMY_ATTR"]),
        category=raw.get("category") or "",
        query=(raw.get("query") or "").lower().strip(),
        product_category=raw.get("product_category") or "",
        rating=str(rating) if rating not in (None, "") else "N.A.",
        instruction=labels.get("instruction"),
        instruction_attributes=labels.get("instruction_attributes"),
        human_instructions=list(human or []),
    )


def _find(data_dir: Path, stem: str, num_products: int | None) -> Path | None:
    """``{stem}_{n}.json`` for the requested size if present, else ``{stem}.json``, else any."""
    preferred = [f"{stem}_{num_products}.json"] if num_products else []
    for name in preferred + [f"{stem}.json"]:
        if (data_dir / name).is_file():
            return data_dir / name
    matches = sorted(data_dir.glob(f"{stem}*.json"))
    return matches[0] if matches else None


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """``data_dir``, else ``$PAW_WEBSHOP_DATA``, else ``None`` (use the embedded catalog)."""
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_ENV_VAR) or None
    if chosen is None:
        return None
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"WebShop data_dir {str(path)!r} is not a directory "
                                f"(set data_dir=... or ${DATA_ENV_VAR} to a folder holding "
                                f"items_shuffle*.json and items_ins_v2*.json)")
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"malformed WebShop data file {str(path)!r}: {err}") from err


def load_official_products(data_dir: str | os.PathLike,
                           num_products: int | None = None) -> tuple[list[Product], str]:
    """Products from WebShop's files in ``data_dir``; returns ``(products, source_text)``.

    Raises:
        FileNotFoundError: when ``items_shuffle*.json`` or ``items_ins_v2*.json`` is missing.
    """
    data_dir = Path(data_dir)
    items_path = _find(data_dir, "items_shuffle", num_products)
    labels_path = _find(data_dir, "items_ins_v2", num_products)
    if items_path is None or labels_path is None:
        raise FileNotFoundError(f"{str(data_dir)!r} must contain items_shuffle*.json and "
                                f"items_ins_v2*.json (WebShop's data files); found "
                                f"{sorted(p.name for p in data_dir.glob('*.json'))}")
    human_path = data_dir / "items_human_ins.json"
    raw_items, labels = _read_json(items_path), _read_json(labels_path)
    human = _read_json(human_path) if human_path.is_file() else {}
    if not isinstance(raw_items, list):
        raise ValueError(f"{items_path} must hold a JSON list of products")
    for path, mapping in ((labels_path, labels), (data_dir / "items_human_ins.json", human)):
        if not isinstance(mapping, dict):
            raise ValueError(f"{path} must hold a JSON object keyed by ASIN, got "
                             f"{type(mapping).__name__}")
    if num_products is not None:
        raw_items = raw_items[:num_products]
    products, seen = [], set()
    for index, raw in enumerate(raw_items):
        if not isinstance(raw, dict):
            raise ValueError(f"{items_path} item {index} is {type(raw).__name__}, expected a "
                             "product object (asin, name, pricing, ...)")
        asin = raw.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(product_from_raw(raw, labels.get(asin), human.get(asin)))
    source = f"official WebShop data {items_path.name} + {labels_path.name} in {data_dir}"
    return products, source
