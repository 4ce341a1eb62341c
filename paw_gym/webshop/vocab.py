"""Vocabulary of the embedded procedural catalog: categories, queries, attributes, options.

Shaped after WebShop's real catalog: five categories with Amazon-style category roots,
about 250 product queries (grouped by department), about 600 attribute phrases in three
grammatical roles (``adj`` comes before the product in an instruction, ``with`` after
"with", ``for`` after "for"), WebShop's option groups (colour, size, style, flavour, scent)
and word pools for brands and filler text. Lists are comma-separated strings to keep the
file readable.
"""

from __future__ import annotations


def _split(text: str) -> list[str]:
    return [w.strip() for w in text.replace("\n", " ").split(",") if w.strip()]


#: category -> (share of products, category-path roots, {department: queries})
CATEGORIES: dict[str, tuple[float, list[str], dict[str, str]]] = {
    "beauty": (0.24, ["Beauty & Personal Care"], {
        "Hair Care": "leave in conditioner, hair clips, shampoo, conditioner, hair oil, hair mask,"
                     " hair spray, dry shampoo, "
                     "hair dryer, flat iron, curling iron, hair brush",
        "Skin Care": "micellar water, sheet masks, face cream, face serum, eye cream, face wash, "
                     "sunscreen, face mask, "
                     "facial toner, body lotion, lip balm, facial cleanser",
        "Makeup": "makeup remover, lip liner, lipstick, foundation, mascara, eyeliner, eye shadow "
                  "palette, concealer, "
                  "blush, makeup brushes, setting spray, lip gloss",
        "Fragrance": "perfume, body mist, cologne, deodorant",
        "Oral Care": "toothpaste, electric toothbrush, mouthwash, teeth whitening strips, "
                     "dental floss",
        "Bath & Body": "body wash, bath bombs, body scrub, hand soap, bath salts",
        "Foot, Hand & Nail Care": "nail polish, nail art kit, nail clippers, press on nails",
        "Shave & Hair Removal": "razor, shaving cream, beard oil, hair trimmer, wax strips",
    }),
    "electronics": (0.23, ["Electronics", "Cell Phones & Accessories"], {
        "Headphones & Audio": "earbud tips, headphone stand, wireless earbuds, over ear "
                              "headphones, gaming headset, "
                              "bluetooth speaker, soundbar",
        "Cables & Power": "hdmi cable, usb c cable, charging cable, ethernet cable, power strip",
        "Computer Accessories": "keyboard wrist rest, laptop cooling pad, laptop stand, wireless "
                                "mouse, mechanical keyboard, usb hub, "
                                "external hard drive, flash drive, webcam, monitor arm, "
                                "laptop sleeve, mouse pad",
        "Phone Accessories": "phone case, screen protector, car phone mount, wireless charger, "
                             "power bank, phone tripod",
        "Television & Video": "tv wall mount, streaming stick, projector screen, "
                              "universal remote, tv antenna",
        "Camera & Photo": "camera strap, lens cleaning kit, camera bag, memory card, ring light, "
                          "action camera, lens filter",
        "Smart Home": "smart plug, security camera, smart bulb, video doorbell, "
                      "wifi extender",
        "Wearable Technology": "smart watch band, fitness tracker, watch charger, "
                               "vr headset strap",
    }),
    "fashion": (0.20, ["Clothing, Shoes & Jewelry"], {
        "Women's Clothing": "women's shorts, women's sweaters, women's dresses, women's blouses, "
                            "women's leggings, women's jeans, "
                            "women's cardigans, women's swimsuits, women's pajamas",
        "Women's Shoes": "women's sneakers, women's sandals, women's boots, women's flats",
        "Men's Clothing": "men's swim trunks, men's t-shirts, men's dress shirts, men's shorts, "
                          "men's jeans, "
                          "men's hoodies, men's jackets, men's polo shirts, men's sweatpants",
        "Men's Shoes": "men's sneakers, men's sandals, men's boots, men's loafers",
        "Accessories": "bucket hats, gloves, baseball caps, beanies, sunglasses, leather belts, "
                       "wallets, backpacks, "
                       "tote bags, scarves, crew socks",
        "Jewelry": "anklets, brooches, necklaces, earrings, bracelets, rings, wrist watches",
        "Kids & Baby": "boys' t-shirts, girls' dresses, baby onesies, kids' sneakers",
    }),
    "garden": (0.21, ["Home & Kitchen", "Patio, Lawn & Garden", "Tools & Home Improvement"], {
        "Furniture": "console tables, coffee tables, bookshelves, office chairs, bar stools, "
                     "tv stands, nightstands, dining chairs, shoe racks",
        "Home Decor": "vases, doormats, throw pillows, wall art, area rugs, curtains, table lamps,"
                      " wall clocks, "
                      "artificial plants, picture frames, scented candles",
        "Bedding": "bed sheets, comforter sets, throw blankets, mattress toppers, bed pillows",
        "Kitchen & Dining": "dish racks, tea kettles, cookware sets, knife sets, cutting boards, "
                            "food storage containers, "
                            "coffee makers, water bottles, mixing bowls",
        "Lighting": "pendant lights, ceiling fans, floor lamps, string lights",
        "Outdoor & Garden": "garden gloves, wind chimes, garden hoses, planters, bird feeders, "
                            "patio chairs, solar lights, "
                            "plant stands",
        "Storage & Organization": "storage bins, laundry hampers, closet organizers, "
                                  "drawer dividers",
    }),
    "grocery": (0.12, ["Grocery & Gourmet Food"], {
        "Snacks": "rice cakes, pretzels, potato chips, protein bars, granola, trail mix, beef "
                  "jerky, popcorn, "
                  "crackers",
        "Beverages": "herbal tea, coconut water, green tea, coffee beans, ground coffee, sparkling"
                     " water, energy drinks, "
                     "hot cocoa mix",
        "Pantry Staples": "balsamic vinegar, olive oil, pasta sauce, raw honey, peanut butter, "
                          "spice blends, "
                          "hot sauce, maple syrup, jasmine rice",
        "Candy & Chocolate": "dark chocolate, gummy candy, breath mints, lollipops",
        "Breakfast Foods": "oatmeal, breakfast cereal, pancake mix",
        "Baking": "vanilla extract, almond flour, cake mix, sprinkles, baking chips",
    }),
}

#: Sub-levels that deepen a category path to 4 or 5 segments.
PATH_SUBLEVELS = _split("Essentials, Accessories, Sets & Kits, Premium, Everyday, Specialty")
PATH_LEAVES = _split("Value Packs, Travel Size, Gift Sets, Refills, Bundles, Singles")

#: Attribute phrases that fit every category.
GENERIC_ATTRIBUTES = {
    "adj": "high quality, easy use, long lasting, easy clean, heavy duty, easy carry, "
           "lightweight design, eco friendly, easy install, non slip, space saving, "
           "easy assemble, gift ready, travel friendly, quick release",
    "with": "gift box, storage case, carrying pouch, lifetime warranty, easy grip handle, "
            "recyclable packaging, instruction manual, replacement parts",
    "for": "daily use, home office, gift giving, everyday wear, small spaces, "
           "outdoor use, travel use",
}

#: category -> role -> attribute phrases.
CATEGORY_ATTRIBUTES: dict[str, dict[str, str]] = {
    "beauty": {
        "adj": "sulfate free, paraben free, cruelty free, alcohol free, fragrance free, "
               "dermatologist tested, oil free, vegan formula, sensitive formula, "
               "waterproof formula, smudge proof, non comedogenic, travel size, "
               "salon grade, mineral based, gluten free formula, talc free, "
               "anti aging, deep cleansing, ultra hydrating, lightweight texture, "
               "fast drying, matte finish, shimmer finish",
        "with": "tea tree, coconut oil, argan oil, hyaluronic acid, vitamin c, shea butter, "
                "aloe vera, jojoba oil, rose water, green tea extract, retinol, "
                "niacinamide, collagen peptides, charcoal powder, keratin protein, "
                "essential oils, natural ingredients, stainless steel blades, "
                "ceramic plates, boar bristles, activated charcoal, peppermint oil, "
                "castor oil, salicylic acid, vitamin e",
        "for": "dry skin, oily skin, sensitive skin, damaged hair, curly hair, fine hair, "
               "hair growth, hair loss, dark circles, fine lines, acne prone skin, "
               "color treated hair, dry scalp, fresh breath, sensitive teeth, "
               "teeth whitening, dark spots, men grooming, women beauty, nail art",
    },
    "electronics": {
        "adj": "high speed, fast charging, noise cancelling, water resistant, "
               "dual band, plug play, ultra slim, shock absorbing, scratch resistant, "
               "wall mountable, voice controlled, battery powered, touch sensitive, "
               "gold plated, braided nylon, tangle free, ultra bright, low latency, "
               "energy efficient, surge protected",
        "with": "usb port, bluetooth connectivity, hd resolution, 4k support, "
                "wireless charging, stereo sound, built microphone, remote control, "
                "rechargeable battery, carrying case, led indicator, magnetic mount, "
                "aluminum alloy, tempered glass, memory foam, motion detection, "
                "night vision, ethernet port, type c connector, app control",
        "for": "home theater, gaming setup, iphone pro, samsung galaxy, macbook pro, "
               "car dashboard, video calls, live streaming, content creators, "
               "music lovers, smart home, desk setup, outdoor adventures, "
               "fitness tracking, kids tablets",
    },
    "fashion": {
        "adj": "machine wash, hand wash, slim fit, classic fit, relaxed fit, regular fit, "
               "moisture wicking, quick drying, wrinkle free, pull on, lace up, "
               "button down, high waist, long sleeve, short sleeve, sleeveless style, "
               "stretch fabric, breathable fabric, fleece lined, water repellent, "
               "adjustable strap, unisex design",
        "with": "polyester spandex, cotton blend, rubber sole, elastic waist, button closure, "
                "zipper closure, drawstring closure, memory foam insole, genuine leather, "
                "faux fur, lace trim, side pockets, hood lining, arch support, "
                "sterling silver, rose gold, stainless steel chain, crystal accents, "
                "uv protection, polarized lenses",
        "for": "daily wear, casual wear, work wear, gym workout, beach vacation, "
               "cold weather, wedding party, running shoes, hiking trips, school days, "
               "lounge wear, formal events, yoga practice",
    },
    "garden": {
        "adj": "solid wood, easy assembly, height adjustable, weather resistant, rust proof, "
               "machine washable, double sided, stain resistant, fade resistant, "
               "dishwasher safe, bpa free, oven safe, non stick, leak proof, "
               "mid century, farmhouse style, modern design, rustic finish, "
               "hand woven, foldable design, stackable design, assembly required",
        "with": "storage space, metal frame, wood frame, glass top, printing technology, "
                "soft cushion, solar panel, led bulbs, cast iron, ceramic coating, "
                "bamboo material, velvet fabric, linen blend, microfiber fabric, "
                "pendant light, light fixture, drainage holes, locking lid, "
                "lumbar support, steel legs",
        "for": "living room, dining room, bedroom decor, home decor, kitchen island, "
               "patio garden, entryway hallway, kids room, dorm room, guest room, "
               "bathroom storage, office desk, outdoor patio, meal prep",
    },
    "grocery": {
        "adj": "gluten free, non gmo, sugar free, low carb, keto friendly, usda organic, "
               "kosher certified, dairy free, nut free, high protein, low sodium, "
               "ready eat, individually wrapped, shelf stable, fair trade, "
               "plant based, caffeine free, whole grain, cold pressed, small batch",
        "with": "natural flavors, real fruit, sea salt, dark cocoa, whole nuts, "
                "chia seeds, oat milk, raw honey sweetener, pink salt, ginger root, "
                "matcha powder, vanilla bean, cinnamon spice, brown rice, "
                "coconut sugar, peanut butter filling, artificial colors free, "
                "resealable bag, glass jar, family size",
        "for": "healthy snacks, breakfast time, lunch boxes, party snacks, "
               "baking recipes, morning coffee, afternoon tea, post workout, "
               "holiday gifts, road trips, movie night, camping trips",
    },
}

#: More category attribute phrases (same roles), merged with :data:`CATEGORY_ATTRIBUTES`.
EXTRA_CATEGORY_ATTRIBUTES: dict[str, dict[str, str]] = {
    "beauty": {
        "adj": "clinically proven, pump dispenser, refillable bottle, quick absorbing, color "
               "safe, frizz control, volumizing formula, sweat resistant, buildable coverage, "
               "cordless design, rechargeable design, ionic technology, professional grade, "
               "gentle exfoliating, soothing formula, brightening formula, firming formula, "
               "lightweight feel, non greasy, long wearing, highly pigmented, unscented formula",
        "with": "argan extract, lavender oil, rosehip oil, witch hazel, glycolic acid, squalane "
                "oil, ceramides blend, biotin complex, zinc oxide, titanium dioxide, bamboo "
                "charcoal, fluoride formula, sea minerals, oat extract, honey extract, cucumber "
                "extract, snail mucin, caffeine extract, avocado oil, almond oil",
        "for": "oily scalp, thinning hair, frizzy hair, puffy eyes, uneven tone, redness relief, "
               "cracked heels, dry lips, bad breath, plaque removal, ingrown hairs, razor bumps, "
               "daily cleansing, night routine, bridal makeup, salon styling, beach waves, "
               "straight hair",
    },
    "electronics": {
        "adj": "lag free, dust proof, ultra thin, foldable frame, hands free, omnidirectional "
               "sound, true wireless, backlit keys, ergonomic shape, overheat protection, auto "
               "pairing, multi device, universal fit, anti glare, privacy screen, weatherproof "
               "housing, heavy gauge, low profile, right angle, shielded design, silent clicks, "
               "cable free",
        "with": "dolby atmos, hdr10 support, gps tracking, heart rate sensor, usb a adapter, "
                "lightning connector, micro sd slot, aux input, optical audio, 1080p camera, "
                "wide angle lens, two way audio, cloud storage, sd card slot, led ring, rgb "
                "lighting, qi certification, pd charging, thunderbolt port, dual speakers",
        "for": "apple watch, ipad air, nintendo switch, xbox controller, ps5 console, android "
               "phones, chromebook laptops, office meetings, online classes, podcast recording, "
               "car travel, bedroom tv, baby monitor, pet monitoring, front porch, garage door, "
               "home gym, long flights",
    },
    "fashion": {
        "adj": "tie dye, color block, v neck, crew neck, mock neck, off shoulder, wide leg, "
               "straight leg, skinny fit, ankle length, knee length, mid rise, cropped length, "
               "oversized fit, ribbed knit, cable knit, distressed denim, non slip sole, slip "
               "resistant, packable design, hypoallergenic metal, tarnish resistant",
        "with": "soft lining, moisture barrier, sherpa lining, padded collar, pointed toe, block "
                "heel, chunky sole, ankle strap, toggle closure, hook closure, velcro closure, "
                "mesh upper, suede upper, canvas upper, leopard print, floral print, plaid "
                "pattern, cubic zirconia, freshwater pearls, adjustable chain",
        "for": "winter season, summer season, spring outfits, fall outfits, business casual, "
               "night out, date night, maternity wear, teen girls, toddler boys, big kids, plus "
               "size women, tall men, music festivals, golf course, tennis court, travel days, "
               "holiday parties",
    },
    "garden": {
        "adj": "easy clean surface, scratch proof, tip over protection, wall mounted, free "
               "standing, cordless operation, dimmable light, motion activated, blackout lining, "
               "thermal insulated, hypoallergenic fill, deep pocket, wrinkle resistant, fade "
               "proof, water proof cover, lead free, food grade, freezer safe, microwave safe, "
               "non toxic, tool free assembly, quiet operation",
        "with": "tufted design, nailhead trim, marble top, acacia wood, mango wood, rattan "
                "weave, jute fiber, wool blend, cotton percale, sateen weave, down alternative, "
                "gel memory foam, soft close drawers, usb charging port, remote dimmer, edison "
                "bulbs, copper wire, hose reel, brass nozzle, self watering",
        "for": "small apartments, master bedroom, farmhouse kitchen, home bar, mudroom entry, "
               "reading nook, laundry room, garage storage, vegetable garden, flower beds, "
               "balcony garden, backyard parties, pool deck, front yard, holiday decor, wedding "
               "decor, nursery room, hot sleepers",
    },
    "grocery": {
        "adj": "non irradiated, hand crafted, slow roasted, kettle cooked, stone ground, air "
               "popped, sprouted grain, wild caught, grass fed, pasture raised, paleo friendly, "
               "vegan certified, low fat, no sugar added, high fiber, lightly salted, extra "
               "virgin, single origin, whole bean, fine ground, naturally sweetened, freeze "
               "dried",
        "with": "almond butter, cashew pieces, dried cranberries, coconut flakes, sunflower "
                "seeds, pumpkin seeds, flax seeds, quinoa crisps, monk fruit, stevia extract, "
                "apple cider vinegar, turmeric root, black pepper, smoked paprika, garlic herb, "
                "chili lime, maple glaze, sea salt caramel, espresso beans, collagen powder",
        "for": "keto diet, vegan diet, kids lunches, office pantry, gift baskets, game day, "
               "picnic lunch, hiking snacks, iced coffee, cold brew, french press, espresso "
               "machines, smoothie bowls, salad dressing, grilling season, holiday baking, "
               "midnight snack, school snacks",
    },
}

#: option group -> value pool; sizes and flavours depend on the category.
COLOR_VALUES = _split(
    "black, white, navy blue, light grey, dark grey, red, burgundy, pink, rose gold, beige, "
    "brown, khaki, olive green, forest green, sky blue, royal blue, purple, lavender, yellow, "
    "orange, teal, ivory, silver, gold, charcoal, coral, mint, walnut, natural wood, "
    "multicolor, clear, cream, plum")
SIZE_VALUES = {
    "fashion": _split("x-small, small, medium, large, x-large, xx-large, 3x-large, 6, 7, 7.5, "
                      "8, 8.5, 9, 9.5, 10, 10.5, 11, 12, one size"),
    "garden": _split("twin, full, queen, king, 16 x 16 inch, 18 x 18 inch, 20 x 20 inch, "
                     "24 x 24 inch, 2 x 3 ft, 4 x 6 ft, 5 x 7 ft, 8 x 10 ft, 1 count, 2 count, "
                     "4 count, 6 count"),
    "beauty": _split("1 fl oz, 2 fl oz, 3.4 fl oz, 8 fl oz, 12 fl oz, 16 fl oz, pack of 1, "
                     "pack of 2, pack of 3, pack of 6, travel set"),
    "electronics": _split("3 ft, 6 ft, 10 ft, 15 ft, 25 ft, 32gb, 64gb, 128gb, 256gb, "
                          "1 pack, 2 pack, 3 pack, small, medium, large"),
    "grocery": _split("4 ounce, 8 ounce, 12 ounce, 16 ounce, 1 pound, 2 pound, pack of 4, "
                      "pack of 6, pack of 12, pack of 24, 1 count, 10 count, 20 count"),
}
STYLE_VALUES = _split("classic, modern, vintage, minimalist, deluxe, standard, pro, "
                      "compact, bundle, starter kit, refill, gift edition")
FLAVOR_VALUES = _split("original, sea salt, barbecue, sour cream onion, honey roasted, "
                       "chocolate, vanilla, strawberry, peanut butter, mixed berry, "
                       "caramel, mint, lemon, cinnamon, unsweetened, variety pack")
SCENT_VALUES = _split("lavender, unscented, citrus, vanilla, eucalyptus, fresh linen, "
                      "coconut, sandalwood, rose, ocean breeze, cucumber melon, peppermint")
#: option groups a category's products may carry, in WebShop's lowercase names.
CATEGORY_OPTION_GROUPS = {
    "beauty": ["color", "size", "scent"],
    "electronics": ["color", "size", "style"],
    "fashion": ["color", "size", "fit type"],
    "garden": ["color", "size", "style"],
    "grocery": ["flavor name", "size"],
}
FIT_VALUES = _split("regular, slim, relaxed, big & tall, petite, plus")

BRAND_SYLLABLES = _split(
    "ar, bel, cor, dan, el, fin, gal, hal, is, jor, ka, lum, mar, nor, ol, pra, quin, ros, "
    "sol, tal, ul, ver, wyn, xan, yor, zel, bri, cal, dor, ev, fa, gen, hex, ira, jet, kin, "
    "lo, mi, nex, or, pol, ri, sky, tor, uni, vo, wa, zu")
#: Neutral words for descriptions and bullets; none forms an attribute phrase.
FILLER_SENTENCES = _split(
    "Designed with care and tested for reliable everyday performance., "
    "Our team checks every unit before it leaves the warehouse., "
    "A thoughtful choice that fits right into your routine., "
    "Simple to set up and ready when you are., "
    "Backed by responsive customer support and a hassle free return policy., "
    "Made to look good and work hard year after year., "
    "Compact packaging keeps shipping waste to a minimum., "
    "Great value compared with similar products in its class.")
