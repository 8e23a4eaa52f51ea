"""The elicitation task's world: its domains, their slots and values, and the irrelevant details.

Pure data (no imports of the task's code), so that the config model validating `elicitation`
(components/tasks/elicitation/config.py) and the generator read it without depending on the task.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    name: str
    values: tuple[str, ...]  # distinct single words
    keywords: tuple[str, ...]  # words a question about the slot uses


@dataclass(frozen=True)
class Domain:
    name: str
    requests: tuple[str, ...]  # the vague first messages
    slots: tuple[Slot, ...]


def _domain(name: str, requests: tuple[str, ...], **slots: tuple[str, str]) -> Domain:
    """A domain from `slot=("Value1 Value2 ...", "keyword1,keyword2,...")`, in slot order."""
    built = tuple(Slot(s, tuple(v.split()), tuple(k.split(","))) for s, (v, k) in slots.items())
    return Domain(name, requests, built)


_DOMAINS = (
    _domain(
        "meeting",
        ("Can you help me book a meeting?", "I need to set up a meeting.", "Please arrange a meeting for me."),
        day=("Monday Tuesday Wednesday Thursday Friday", "day,date,weekday,when"),
        time=("morning noon afternoon evening", "time,hour,when"),
        place=("online office cafe library", "place,where,location,venue,room"),
    ),
    _domain(
        "restaurant",
        (
            "Can you help me book a restaurant?",
            "I want to reserve a table for dinner.",
            "Please find me a place to eat.",
        ),
        cuisine=("Italian Mexican Thai Indian Japanese", "cuisine,food,dish,eat"),
        seating=("indoor outdoor terrace bar", "seat,seating,sit,table,inside,outside"),
        price=("cheap moderate fancy luxury", "price,budget,cost,spend,expensive"),
    ),
    _domain(
        "trip",
        ("Can you help me plan a trip?", "I need to book a trip.", "Please organize a short trip for me."),
        city=("Paris Rome Tokyo Berlin Lisbon", "city,destination,where,visit"),
        room=("single double suite twin", "room,bed,hotel"),
        transport=("train plane car bus ferry", "transport,transportation,travel,get there,ride"),
    ),
    _domain(
        "pizza",
        ("Can you help me order a pizza?", "I'd like to get a pizza.", "Please order a pizza for me."),
        size=("small medium large giant", "size,big"),
        crust=("thin thick stuffed crispy", "crust,base,dough"),
        topping=("mushroom pepperoni olive ham pineapple", "topping,top,put on"),
    ),
    _domain(
        "gift",
        ("Can you help me pick a gift?", "I need to buy a present.", "Please choose a gift for my friend."),
        item=("book scarf candle mug plant", "gift,present,item,buy"),
        color=("red blue green yellow purple", "color,colour"),
        wrap=("paper box bag ribbon", "wrap,wrapped,wrapping,packaging,package,pack"),
    ),
    _domain(
        "haircut",
        ("Can you help me book a haircut?", "I need a haircut.", "Please book me a hair appointment."),
        style=("bob fade buzz shag", "style,cut,look,haircut"),
        color=("blonde brown black red", "color,colour,dye,shade"),
        time=("morning noon afternoon evening", "time,hour,when"),
    ),
)
DOMAINS: dict[str, Domain] = {d.name: d for d in _DOMAINS}

# Irrelevant details (never scored) and the topic words a question must name to hear them.
DETAILS: dict[str, tuple[str, ...]] = {
    "I have a dog named Rex.": ("dog", "pet"),
    "My sister lives nearby.": ("sister", "family"),
    "I drink a lot of coffee.": ("coffee", "drink"),
    "I work as a nurse.": ("work", "job", "nurse"),
    "I play the guitar.": ("guitar", "hobby", "music"),
    "I am allergic to cats.": ("allergy", "allergic", "cat"),
    "I ride my bike everywhere.": ("bike", "cycle"),
    "My name is Sam.": ("name",),
}
