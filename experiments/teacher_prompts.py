"""What the teacher is asked to write: domains (with their concept words and example events), prompt
templates, and prose topics. Pure data, no imports beyond the standard library, so the recipe, its
tests and the documentation read one list.

Every domain gives two ordinary (``benign``) and two self-contradictory example events; the teacher
sees them as the start of a numbered list and writes the next item. The group of a written event is
the group the teacher was *asked* for; nothing checks that a "contradictory" event really
contradicts itself (a 135 M-parameter teacher often writes an ordinary one instead). The shipped
study's own events (``assets/studies/inventory_order.json``) are not among the examples.
"""

from __future__ import annotations

DOMAINS: tuple[dict, ...] = (
    {
        "name": "stock and orders",
        "place": "a shop and its warehouse",
        "concepts": ("order", "inventory", "person", "customer", "stock", "warehouse", "delivery", "supplier", "shelf"),
        "benign": (
            "A customer ordered six lamps, and the warehouse shipped them the same day.",
            "The supplier delivered forty boxes of paper, and the clerk added them to the inventory.",
        ),
        "contradictory": (
            "The warehouse holds 30 chairs, yet it shipped 50 chairs from stock this morning.",
            "The order was cancelled on Monday, but it was delivered in full on Friday as the active order.",
        ),
    },
    {
        "name": "hospital wards",
        "place": "a hospital ward",
        "concepts": ("patient", "nurse", "bed", "ward", "doctor", "shift", "medicine", "admission", "room"),
        "benign": (
            "A nurse moved the patient to a quiet bed near the window after lunch.",
            "The doctor admitted two patients to the ward, and both beds were ready.",
        ),
        "contradictory": (
            "The ward has twelve beds, and fifteen patients each slept in their own bed last night.",
            "The patient was discharged at noon, but he was still admitted to the same bed all afternoon.",
        ),
    },
    {
        "name": "schedules and meetings",
        "place": "an office calendar",
        "concepts": ("meeting", "schedule", "manager", "team", "room", "deadline", "agenda", "calendar", "employee"),
        "benign": (
            "The manager moved the team meeting to Thursday so everyone could attend.",
            "An employee booked the small room for a one-hour planning session.",
        ),
        "contradictory": (
            "The meeting starts at three o'clock and ends at two o'clock on the same afternoon.",
            "All ten people attended the meeting, although only seven people were invited and nobody else came.",
        ),
    },
    {
        "name": "ledgers and payments",
        "place": "a company's accounts",
        "concepts": ("payment", "invoice", "account", "balance", "bank", "client", "ledger", "budget", "accountant"),
        "benign": (
            "The accountant recorded the client's payment and closed the invoice.",
            "The company paid its rent on time, and the bank confirmed the transfer.",
        ),
        "contradictory": (
            "The account held 200 dollars, and after a 500 dollar payment it held 900 dollars.",
            "The invoice was paid twice, yet the ledger shows that it was never paid at all.",
        ),
    },
    {
        "name": "travel and bookings",
        "place": "an airport and its hotels",
        "concepts": ("flight", "passenger", "ticket", "hotel", "booking", "airport", "luggage", "seat", "gate"),
        "benign": (
            "The passenger checked in early and found a window seat on the morning flight.",
            "A family booked two hotel rooms near the airport for their trip.",
        ),
        "contradictory": (
            "The flight left at nine, and the passenger boarded it at ten after it had left.",
            "The hotel was fully booked, yet every one of its rooms stood empty that night.",
        ),
    },
    {
        "name": "schools and classes",
        "place": "a school",
        "concepts": ("student", "teacher", "class", "exam", "school", "lesson", "homework", "grade", "parent"),
        "benign": (
            "The teacher handed back the exams, and most students passed.",
            "A student stayed after class to ask about the homework.",
        ),
        "contradictory": (
            "The class has twenty students, and thirty of them were absent on Monday.",
            "The exam was cancelled, but every student sat the same exam that morning.",
        ),
    },
    {
        "name": "restaurants and kitchens",
        "place": "a restaurant",
        "concepts": ("chef", "waiter", "table", "menu", "kitchen", "guest", "meal", "reservation", "bill"),
        "benign": (
            "The waiter brought the guests their soup while the chef prepared the main course.",
            "A couple reserved a table for eight o'clock and arrived on time.",
        ),
        "contradictory": (
            "The kitchen ran out of fish, and then it served fish to every guest all evening.",
            "The table for four seated six guests, each on one of its four chairs.",
        ),
    },
    {
        "name": "farms and harvests",
        "place": "a farm",
        "concepts": ("farmer", "field", "harvest", "crop", "weather", "tractor", "market", "seed", "barn"),
        "benign": (
            "The farmer harvested the wheat before the rain began.",
            "A neighbour lent his tractor so the field could be ploughed on time.",
        ),
        "contradictory": (
            "The field was never planted, yet it gave the farm its largest harvest of corn.",
            "The barn was empty all winter, and it was full of hay the whole time.",
        ),
    },
    {
        "name": "building and repairs",
        "place": "a building site",
        "concepts": ("builder", "house", "wall", "roof", "plan", "contract", "owner", "material", "repair"),
        "benign": (
            "The builders finished the roof a week before the owner moved in.",
            "A plumber repaired the leaking pipe under the kitchen sink.",
        ),
        "contradictory": (
            "The house has no roof, and the owner praised its new roof after the storm.",
            "The wall was built with 300 bricks from a pallet that held 100 bricks in all.",
        ),
    },
    {
        "name": "libraries and loans",
        "place": "a public library",
        "concepts": ("book", "library", "reader", "loan", "shelf", "librarian", "catalogue", "member", "return"),
        "benign": (
            "A reader borrowed three novels and returned them two weeks later.",
            "The librarian added the new atlas to the catalogue.",
        ),
        "contradictory": (
            "The library owns one copy of the book, and five members borrowed it on the same day.",
            "The book was returned last week, although nobody ever borrowed it.",
        ),
    },
    {
        "name": "sports and games",
        "place": "a football club",
        "concepts": ("team", "player", "coach", "match", "score", "game", "stadium", "fan", "ticket"),
        "benign": (
            "The team won the match two goals to one in front of its home fans.",
            "The coach gave the young player his first start on Saturday.",
        ),
        "contradictory": (
            "The home team won the match, and the visitors won the same match by three goals.",
            "The stadium was sold out, and not a single ticket was sold.",
        ),
    },
    {
        "name": "transport and deliveries",
        "place": "a delivery company",
        "concepts": ("driver", "truck", "parcel", "route", "address", "delivery", "depot", "customer", "package"),
        "benign": (
            "The driver delivered every parcel on his route before five o'clock.",
            "A customer collected her package from the depot in the morning.",
        ),
        "contradictory": (
            "The truck was empty when it left the depot, and it delivered forty parcels.",
            "The parcel arrived on Tuesday, two days before it was sent.",
        ),
    },
    {
        "name": "banks and loans",
        "place": "a bank",
        "concepts": ("loan", "bank", "customer", "interest", "account", "saver", "money", "rate", "branch"),
        "benign": (
            "The bank approved the customer's loan after checking her income.",
            "A saver opened an account and deposited his first wages.",
        ),
        "contradictory": (
            "The loan was repaid in full, and the borrower still owes the whole sum.",
            "The branch was closed all week, and it opened twenty new accounts on Wednesday.",
        ),
    },
    {
        "name": "homes and families",
        "place": "a family home",
        "concepts": ("family", "child", "parent", "house", "dinner", "neighbour", "garden", "pet", "room"),
        "benign": (
            "The family ate dinner in the garden on the first warm evening.",
            "A neighbour fed the cat while the children were away.",
        ),
        "contradictory": (
            "The family has two children, and all three of them started school this year.",
            "The house has no garden, and the children played in its garden all afternoon.",
        ),
    },
)

#: Prompt templates the answers are written for: the shipped study's five and seven more shapes.
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("t1_describe", "Event: {event}\nDescribe how {concepts} relate in this event."),
    ("t2_explain", "Read this business event and explain the relation between {concepts}.\n{event}"),
    ("t3_story", "{event}\nIn a few sentences, describe what happens between {concepts}."),
    ("t4_note", "A store manager writes a short note about this event: {event}\nThe note mentions {concepts}."),
    ("t5_summary", "Summarize the situation for the operations team. Event: {event} Focus on {concepts}."),
    ("t6_report", "Write a short report of this event: {event}\nMention {concepts}."),
    ("t7_why", "{event}\nExplain what this means for {concepts}."),
    ("t8_witness", "Someone saw this happen: {event}\nTell the story, using the words {concepts}."),
    ("t9_plain", "Event: {event}\nWrite a paragraph about {concepts}."),
    ("t10_check", "Check this event and say whether it makes sense: {event}\nRefer to {concepts}."),
    ("t11_email", "Write a short email about this event: {event}\nMention {concepts}."),
    ("t12_lesson", "What can we learn from this event? {event}\nDiscuss {concepts}."),
)

#: Topics of plain short prose (general English the student sees beside the answers).
PROSE_TOPICS: tuple[str, ...] = (
    "a rainy morning in a small town", "how bread is baked", "a walk in the forest", "why people keep diaries",
    "a busy train station", "learning to ride a bicycle", "the first day at a new job", "how bees make honey",
    "a market on Saturday", "a letter to an old friend", "cooking dinner for guests", "a storm at sea",
    "how a library works", "planting a vegetable garden", "a visit to the dentist", "the life of a river",
    "moving to a new city", "a football match", "how money is saved", "a quiet evening at home",
    "the four seasons", "a museum of old machines", "a conversation with a neighbour", "fixing a broken chair",
    "how a bill becomes a law", "why the sky is blue", "a children's birthday party", "a long car journey",
    "writing a good email", "a doctor's busy day", "how letters are delivered", "a mountain village",
    "shopping for groceries", "an old photograph", "keeping a pet dog", "a school science fair",
    "how to plan a budget", "a night at the theatre", "a farmer's year", "the history of the bicycle",
    "a hotel at the seaside", "a fire drill at work", "learning a new language", "a lost umbrella",
    "how a bridge is built", "a day at the beach", "a small bakery", "a meeting that went well",
    "making friends at school", "a winter holiday", "how computers store files", "a city park in spring",
    "a kitchen after a party", "why sleep matters", "a bus driver's route", "an honest mistake",
    "a garden after the rain", "a new library card", "the busiest day of the year at a shop", "a careful plan",
)

EVENT_GROUPS = ("benign", "contradictory")

EVENT_LEAD = {
    "benign": "Here are short examples of ordinary everyday events at {place}:",
    "contradictory": "Here are short examples of self-contradictory events at {place}, where the facts or numbers "
                     "cannot all be true:",
}

PROSE_REQUEST = "Write a short paragraph of plain English about {topic}."
