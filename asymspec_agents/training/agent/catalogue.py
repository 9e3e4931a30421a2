"""Invented tools for agent training: many domains, typed arguments, questions that state the argument values.

A `Tool` knows how users ask for it (`asks`: templates whose `{placeholders}` are its arguments; an optional argument
is passed exactly when the chosen template mentions it), what it returns (`result`: computed with the standard
library where the tool is a real function, otherwise a plausible invented value), how an assistant states that
result (`answer`) and what it does in a few words (`task`, for "none of my tools can …" replies).

Nothing here is taken from a benchmark: the tools, names and wordings are written for this file, and the
benchmarks' own tools (`stdlib_text.TOOL_MODULES`, BFCL) are never read by the training code.
"""

from __future__ import annotations

import calendar
import datetime
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Denver", "Nairobi", "Hanoi", "Porto", "Quebec", "Perth",
          "Bergen", "Cusco", "Tbilisi", "Leeds", "Austin", "Krakow", "Seville", "Manila", "Dakar"]
COUNTRIES = ["Chile", "Norway", "Kenya", "Vietnam", "Portugal", "Canada", "Peru", "Georgia", "Ghana", "Finland",
             "Morocco", "Nepal", "Uruguay", "Iceland", "Latvia", "Bhutan"]
PEOPLE = ["Ada Brenner", "Tomas Okafor", "Lena Varga", "Ravi Menon", "Ines Duarte", "Kenji Sato", "Omar Haddad",
          "Greta Lind", "Paulo Reis", "Hana Novak", "Yusuf Demir", "Mira Kovac"]
TICKERS = ["ACME", "ZEN", "NOVA", "KITE", "ORCA", "BOLT", "PIXL", "QUAD"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "CAD", "INR", "BRL"]
LANGUAGES = ["French", "Spanish", "German", "Japanese", "Swahili", "Italian", "Polish", "Turkish"]
FOODS = ["lentil soup", "banana bread", "pad thai", "shakshuka", "risotto", "falafel", "pancakes", "ramen"]
TEAMS = ["Red Falcons", "Harbor City FC", "Blue Comets", "Mountain Lions", "Riverside United", "Iron Owls"]
PRODUCTS = ["wireless mouse", "desk lamp", "trail backpack", "espresso grinder", "yoga mat", "phone charger"]
WORDS = ["serendipity", "harbor", "lantern", "velocity", "meadow", "quartz", "tundra", "mosaic", "ember"]
SONGS = ["Golden Hour", "Paper Moons", "Northern Lights", "Slow River", "City of Glass", "Blue Static"]
GENRES = ["jazz", "rock", "classical", "hip hop", "folk", "ambient"]
ROOMS = ["kitchen", "bedroom", "living room", "office", "garage", "hallway"]


@dataclass(frozen=True)
class Arg:
    name: str
    type: str  # JSON schema type: string, integer, number, boolean, array
    description: str
    value: Callable[[Random], Any]  # a value a user would ask with
    required: bool = True
    enum: tuple | None = None
    items: str | None = None  # the JSON type of an array's items
    say: Callable[[Any], str] = str  # how a question words the value

    def schema(self, rng: Random) -> dict:
        out: dict[str, Any] = {"type": self.type}
        if rng.random() < 0.85:  # some schemas come without descriptions
            out["description"] = self.description
        if self.enum:
            out["enum"] = list(self.enum)
        if self.items:
            out["items"] = {"type": self.items}
        return out


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: tuple[Arg, ...]
    asks: tuple[str, ...]  # question templates; placeholders are argument names
    result: Callable[[dict, Random], Any]
    answer: str  # "{result}" and argument placeholders; a dict result's keys as {r[key]}
    task: str  # "look up the weather": what the tool does, for replies that have no tool for a question
    domain: str = ""
    errors: tuple[str, ...] = field(default_factory=tuple)  # messages the tool may fail with

    def spec(self, rng: Random, name: str | None = None) -> dict:
        required = [a.name for a in self.args if a.required]
        parameters = {"type": "object", "properties": {a.name: a.schema(rng) for a in self.args}}
        if required:
            parameters["required"] = required
        return {"name": name or self.name, "description": self.description, "parameters": parameters}


def _int(low: int, high: int) -> Callable[[Random], int]:
    return lambda rng: rng.randint(low, high)


def _float(low: float, high: float, digits: int = 1) -> Callable[[Random], float]:
    return lambda rng: round(rng.uniform(low, high), digits)


def _pick(options) -> Callable[[Random], Any]:
    return lambda rng: rng.choice(list(options))


def _numbers(rng: Random) -> list[int]:
    return [rng.randint(1, 99) for _ in range(rng.randint(3, 6))]


def _listing(values) -> str:
    values = [str(v) for v in values]
    return ", ".join(values[:-1]) + " and " + values[-1]


def _date(rng: Random) -> str:
    return (datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 900))).isoformat()


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _r(value: float, digits: int = 2) -> float:
    return round(value, digits)


DOC_TOPICS = {
    "the with statement": "the with statement wraps a block in a context manager, whose exit code runs even on errors.",
    "the yield keyword": "yield turns a function into a generator that produces values one at a time.",
    "list comprehensions": "a list comprehension builds a list from an expression and a for clause in one line.",
    "the walrus operator": "the := operator assigns a value inside an expression.",
    "decorators": "a decorator is a function that takes a function and returns a changed one.",
    "f-strings": "an f-string is a string literal prefixed with f whose {expressions} are evaluated.",
    "the global statement": "global makes names in a function refer to module-level variables.",
    "exceptions": "exceptions signal errors; try and except blocks catch them.",
    "the lambda keyword": "lambda creates a small anonymous function from one expression.",
    "slicing": "a slice a[start:stop:step] selects part of a sequence.",
}
ENCYCLOPEDIA = {
    "Ada Lovelace": "Ada Lovelace (1815-1852) wrote the first published algorithm for a computing machine.",
    "the Eiffel Tower": "The Eiffel Tower is a 330-metre iron tower in Paris, finished in 1889.",
    "Marie Curie": "Marie Curie (1867-1934) won Nobel Prizes in both physics and chemistry.",
    "the Great Barrier Reef": "The Great Barrier Reef is the largest coral reef system, off Queensland, Australia.",
    "Alan Turing": "Alan Turing (1912-1954) founded theoretical computer science and broke wartime codes.",
    "the Amazon River": "The Amazon River carries more water than any other river on Earth.",
    "Hypatia": "Hypatia (died 415) was a mathematician and astronomer in Alexandria.",
    "Mount Kilimanjaro": "Mount Kilimanjaro, 5,895 metres high, is the tallest mountain in Africa.",
}


def _expression(rng: Random) -> str:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 20)
    return rng.choice([f"{a} * ({b} + {c})", f"({a} - {b}) * {c}", f"{a} + {b} * {c}", f"({a} + {b}) / {c}",
                       f"{a} * {b}", f"{a} - {b} + {c}"])


def _evaluate(expression: str) -> float:
    """The value of an expression `_expression` wrote (numbers, + - * /, parentheses), without eval."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}

    def walk(node):
        if isinstance(node, ast.BinOp):
            return ops[type(node.op)](walk(node.left), walk(node.right))
        return node.value

    value = walk(ast.parse(expression, mode="eval").body)
    return round(value, 4) if isinstance(value, float) else value


TOOLS: tuple[Tool, ...] = (
    # -- weather and places
    Tool("get_current_weather", "Get the current weather conditions for a city.",
         (Arg("city", "string", "Name of the city", _pick(CITIES)),
          Arg("unit", "string", "Temperature unit", _pick(["celsius", "fahrenheit"]), required=False,
              enum=("celsius", "fahrenheit"))),
         ("What's the weather like in {city} right now?", "Is it raining in {city}?",
          "How warm is it in {city} in {unit}?", "Tell me the current weather in {city}, in {unit} please."),
         lambda a, rng: {"temperature": rng.randint(-5, 34), "condition": rng.choice(["sunny", "cloudy", "rainy", "windy"])},
         "It is currently {r[temperature]} degrees and {r[condition]} in {city}.", "check the weather", "weather"),
    Tool("get_forecast", "Weather forecast for the coming days.",
         (Arg("location", "string", "City to forecast", _pick(CITIES)),
          Arg("days", "integer", "Number of days ahead (1-7)", _int(1, 7), required=False)),
         ("Give me the {days}-day forecast for {location}.", "What will the weather be in {location} this week?",
          "Forecast for {location} for the next {days} days?"),
         lambda a, rng: f"mostly {rng.choice(['sunny', 'dry', 'wet', 'mild'])}, highs near {rng.randint(8, 30)} degrees",
         "The forecast for {location}: {result}.", "get a weather forecast", "weather"),
    Tool("city_population", "Look up the number of people living in a city.",
         (Arg("city", "string", "The city", _pick(CITIES)),),
         ("How many people live in {city}?", "What is the population of {city}?"),
         lambda a, rng: rng.randint(80_000, 9_000_000),
         "{city} has a population of about {result}.", "look up populations", "geography"),
    Tool("distance_between_cities", "Driving distance in kilometers between two cities.",
         (Arg("origin", "string", "Start city", _pick(CITIES[:10])),
          Arg("destination", "string", "End city", _pick(CITIES[10:]))),
         ("How far is it from {origin} to {destination}?", "What's the distance between {origin} and {destination} by road?"),
         lambda a, rng: rng.randint(40, 4000),
         "It is about {result} km from {origin} to {destination}.", "measure distances between cities", "geography"),
    Tool("local_time", "Current local time in a city.",
         (Arg("city", "string", "City name", _pick(CITIES)),),
         ("What time is it in {city}?", "Tell me the local time in {city}."),
         lambda a, rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
         "It is {result} in {city} right now.", "tell the time in other places", "time"),
    # -- math on real functions
    Tool("circle_area", "Compute the area of a circle from its radius.",
         (Arg("radius", "number", "Radius of the circle", _float(1, 40)),),
         ("What is the area of a circle with radius {radius}?", "Find the area of a circle whose radius is {radius} cm."),
         lambda a, rng: _r(math.pi * a["radius"] ** 2),
         "The area is {result}.", "compute areas of circles", "math"),
    Tool("rectangle_perimeter", "Perimeter of a rectangle.",
         (Arg("width", "number", "Width", _int(2, 90)), Arg("length", "number", "Length", _int(2, 90))),
         ("What is the perimeter of a rectangle {width} wide and {length} long?",
          "A rectangle has width {width} and length {length}. What's its perimeter?"),
         lambda a, rng: 2 * (a["width"] + a["length"]),
         "The perimeter is {result}.", "compute perimeters", "math"),
    Tool("hypotenuse", "Length of the hypotenuse of a right triangle given its two legs.",
         (Arg("a", "number", "First leg", _int(2, 60)), Arg("b", "number", "Second leg", _int(2, 60))),
         ("A right triangle has legs {a} and {b}. How long is the hypotenuse?",
          "Compute the hypotenuse for sides {a} and {b}."),
         lambda a, rng: _r(math.hypot(a["a"], a["b"])),
         "The hypotenuse is {result}.", "solve right triangles", "math"),
    Tool("greatest_common_divisor", "Greatest common divisor of two integers.",
         (Arg("x", "integer", "First integer", _int(12, 600)), Arg("y", "integer", "Second integer", _int(12, 600))),
         ("What is the GCD of {x} and {y}?", "Find the greatest common divisor of {x} and {y}."),
         lambda a, rng: math.gcd(a["x"], a["y"]),
         "The greatest common divisor of {x} and {y} is {result}.", "compute common divisors", "math"),
    Tool("least_common_multiple", "Least common multiple of two integers.",
         (Arg("first", "integer", "An integer", _int(2, 60)), Arg("second", "integer", "Another integer", _int(2, 60))),
         ("What's the least common multiple of {first} and {second}?", "LCM of {first} and {second}?"),
         lambda a, rng: math.lcm(a["first"], a["second"]),
         "The least common multiple is {result}.", "compute multiples", "math"),
    Tool("factorial", "Return n! for a non-negative integer n.",
         (Arg("n", "integer", "The number", _int(3, 15)),),
         ("What is {n} factorial?", "Compute the factorial of {n}."),
         lambda a, rng: math.factorial(a["n"]),
         "{n}! is {result}.", "compute factorials", "math"),
    Tool("is_prime", "Check whether an integer is a prime number.",
         (Arg("number", "integer", "The integer to test", _int(2, 2000)),),
         ("Is {number} a prime number?", "Check if {number} is prime."),
         lambda a, rng: f"{a['number']} is {'' if _is_prime(a['number']) else 'not '}prime",
         "{result}.", "test numbers for primality", "math"),
    Tool("average", "Arithmetic mean of a list of numbers.",
         (Arg("values", "array", "The numbers", _numbers, items="number", say=_listing),),
         ("What is the average of {values}?", "Compute the mean of these numbers: {values}."),
         lambda a, rng: _r(statistics.fmean(a["values"])),
         "The average is {result}.", "average numbers", "math"),
    Tool("median_of", "Median of a list of numbers.",
         (Arg("numbers", "array", "Values", _numbers, items="number", say=_listing),),
         ("Find the median of {numbers}.", "What's the median value of {numbers}?"),
         lambda a, rng: statistics.median(a["numbers"]),
         "The median is {result}.", "find medians", "math"),
    Tool("power", "Raise a base to an exponent.",
         (Arg("base", "number", "The base", _int(2, 12)), Arg("exponent", "integer", "The exponent", _int(2, 9))),
         ("What is {base} to the power of {exponent}?", "Calculate {base} raised to {exponent}."),
         lambda a, rng: a["base"] ** a["exponent"],
         "{base} to the power of {exponent} is {result}.", "compute powers", "math"),
    Tool("compound_interest", "Final amount of an investment with yearly compound interest.",
         (Arg("principal", "number", "Starting amount", _int(500, 50000)),
          Arg("rate", "number", "Yearly interest rate as a decimal, e.g. 0.05", _pick([0.02, 0.03, 0.04, 0.05, 0.07])),
          Arg("years", "integer", "Number of years", _int(1, 30))),
         ("If I invest {principal} dollars at a rate of {rate} for {years} years, how much will I have?",
          "Compute compound interest on {principal} at {rate} yearly over {years} years."),
         lambda a, rng: _r(a["principal"] * (1 + a["rate"]) ** a["years"]),
         "After {years} years you would have {result}.", "compute investment growth", "finance"),
    Tool("loan_payment", "Monthly payment of a fixed-rate loan.",
         (Arg("amount", "number", "Loan amount", _int(1000, 400000)),
          Arg("annual_rate", "number", "Annual interest rate in percent", _pick([3.5, 4.0, 5.25, 6.0, 7.5])),
          Arg("months", "integer", "Term in months", _pick([12, 24, 36, 60, 120, 360]))),
         ("What's the monthly payment on a {amount} loan at {annual_rate}% over {months} months?",
          "I borrow {amount} at {annual_rate} percent for {months} months. Monthly payment?"),
         lambda a, rng: _r(a["amount"] * (a["annual_rate"] / 1200) / (1 - (1 + a["annual_rate"] / 1200) ** -a["months"])),
         "The monthly payment would be {result}.", "compute loan payments", "finance"),
    Tool("tip_amount", "Tip to leave on a bill.",
         (Arg("bill", "number", "Bill total", _float(8, 300, 2)),
          Arg("percent", "integer", "Tip percentage", _pick([10, 12, 15, 18, 20]), required=False)),
         ("How much should I tip on a {bill} bill?", "What's a {percent}% tip on {bill}?"),
         lambda a, rng: _r(a["bill"] * a.get("percent", 15) / 100),
         "The tip comes to {result}.", "compute tips", "finance"),
    # -- units and dates
    Tool("convert_temperature", "Convert a temperature between Celsius and Fahrenheit.",
         (Arg("value", "number", "Temperature to convert", _int(-20, 110)),
          Arg("to_unit", "string", "Unit to convert to", _pick(["celsius", "fahrenheit"]), enum=("celsius", "fahrenheit"))),
         ("Convert {value} degrees to {to_unit}.", "What is {value} degrees in {to_unit}?"),
         lambda a, rng: _r(a["value"] * 9 / 5 + 32 if a["to_unit"] == "fahrenheit" else (a["value"] - 32) * 5 / 9, 1),
         "That is {result} degrees {to_unit}.", "convert temperatures", "units"),
    Tool("convert_length", "Convert a length from one unit to another.",
         (Arg("amount", "number", "The length", _int(1, 500)),
          Arg("from_unit", "string", "Unit of the amount", _pick(["miles", "feet", "inches"]), enum=("miles", "feet", "inches")),
          Arg("to_unit", "string", "Unit wanted", _pick(["kilometers", "meters", "centimeters"]),
              enum=("kilometers", "meters", "centimeters"))),
         ("How many {to_unit} is {amount} {from_unit}?", "Convert {amount} {from_unit} to {to_unit}."),
         lambda a, rng: _r(a["amount"] * {"miles": 1609.344, "feet": 0.3048, "inches": 0.0254}[a["from_unit"]]
                           / {"kilometers": 1000, "meters": 1, "centimeters": 0.01}[a["to_unit"]]),
         "{amount} {from_unit} is {result} {to_unit}.", "convert lengths", "units"),
    Tool("convert_currency", "Convert money between currencies at today's rate.",
         (Arg("amount", "number", "Amount of money", _int(5, 5000)),
          Arg("source", "string", "Currency code to convert from", _pick(CURRENCIES[:4])),
          Arg("target", "string", "Currency code to convert to", _pick(CURRENCIES[4:]))),
         ("How much is {amount} {source} in {target}?", "Convert {amount} {source} into {target}."),
         lambda a, rng: _r(a["amount"] * rng.uniform(0.5, 3.0)),
         "{amount} {source} is about {result} {target}.", "convert currencies", "finance"),
    Tool("days_between", "Number of days between two dates (YYYY-MM-DD).",
         (Arg("start_date", "string", "First date", _date), Arg("end_date", "string", "Second date", _date)),
         ("How many days are there between {start_date} and {end_date}?", "Count the days from {start_date} to {end_date}."),
         lambda a, rng: abs((datetime.date.fromisoformat(a["end_date"]) - datetime.date.fromisoformat(a["start_date"])).days),
         "There are {result} days between {start_date} and {end_date}.", "count days between dates", "time"),
    Tool("weekday_of", "Day of the week of a date given as YYYY-MM-DD.",
         (Arg("date", "string", "The date", _date),),
         ("What day of the week is {date}?", "Which weekday falls on {date}?"),
         lambda a, rng: calendar.day_name[datetime.date.fromisoformat(a["date"]).weekday()],
         "{date} is a {result}.", "find weekdays of dates", "time"),
    Tool("is_leap_year", "Whether a year is a leap year.",
         (Arg("year", "integer", "The year", _int(1800, 2400)),),
         ("Is {year} a leap year?", "Was {year} a leap year?"),
         lambda a, rng: f"{a['year']} is {'' if calendar.isleap(a['year']) else 'not '}a leap year",
         "{result}.", "check leap years", "time"),
    # -- text
    Tool("translate_text", "Translate text into another language.",
         (Arg("text", "string", "Text to translate", _pick(["good morning", "thank you very much", "where is the station",
                                                              "see you tomorrow", "the soup is hot"])),
          Arg("language", "string", "Target language", _pick(LANGUAGES))),
         ("Translate '{text}' into {language}.", "How do you say '{text}' in {language}?"),
         lambda a, rng: f"[{a['language']}] {a['text']}",
         "In {language}: {result}", "translate text", "text"),
    Tool("define_word", "Dictionary definition of an English word.",
         (Arg("word", "string", "The word", _pick(WORDS)),),
         ("What does '{word}' mean?", "Define the word {word}."),
         lambda a, rng: f"{a['word']} (noun): a word from the dictionary entry {rng.randint(100, 999)}",
         "Definition: {result}", "look up definitions", "text"),
    Tool("count_words", "Count the words in a piece of text.",
         (Arg("text", "string", "The text", _pick(["the quick brown fox jumps over the lazy dog",
                                                     "to be or not to be", "all that glitters is not gold",
                                                     "a journey of a thousand miles begins with a single step"])),),
         ("How many words are in '{text}'?", "Count the words of this sentence: {text}"),
         lambda a, rng: len(a["text"].split()),
         "The text has {result} words.", "count words", "text"),
    # -- commerce and services
    Tool("get_stock_price", "Latest trading price of a stock by ticker symbol.",
         (Arg("ticker", "string", "Ticker symbol", _pick(TICKERS)),),
         ("What's {ticker} trading at?", "Get me the current stock price of {ticker}."),
         lambda a, rng: _r(rng.uniform(5, 900)),
         "{ticker} is trading at {result}.", "look up stock prices", "finance"),
    Tool("track_package", "Status of a parcel by tracking number.",
         (Arg("tracking_number", "string", "The tracking number", lambda rng: f"TRK{rng.randint(100000, 999999)}"),),
         ("Where is my package {tracking_number}?", "Track parcel {tracking_number} for me."),
         lambda a, rng: rng.choice(["in transit", "out for delivery", "delivered", "held at the depot"]),
         "Package {tracking_number} is {result}.", "track parcels", "shopping"),
    Tool("product_price", "Price of a product in the store catalogue.",
         (Arg("product", "string", "Product name", _pick(PRODUCTS)),
          Arg("store", "string", "Store branch", _pick(CITIES), required=False)),
         ("How much does the {product} cost?", "What's the price of a {product} at the {store} store?"),
         lambda a, rng: _r(rng.uniform(9, 400)),
         "The {product} costs {result}.", "look up product prices", "shopping"),
    Tool("order_status", "Status of a customer order.",
         (Arg("order_id", "integer", "Order number", _int(10000, 99999)),),
         ("What's the status of order {order_id}?", "Has order number {order_id} shipped yet?"),
         lambda a, rng: rng.choice(["processing", "shipped", "cancelled", "delivered"]),
         "Order {order_id} is {result}.", "check orders", "shopping"),
    Tool("book_flight", "Book a flight between two cities on a date.",
         (Arg("from_city", "string", "Departure city", _pick(CITIES[:10])),
          Arg("to_city", "string", "Arrival city", _pick(CITIES[10:])),
          Arg("date", "string", "Travel date YYYY-MM-DD", _date),
          Arg("seat_class", "string", "Cabin class", _pick(["economy", "business"]), required=False,
              enum=("economy", "business"))),
         ("Book me a flight from {from_city} to {to_city} on {date}.",
          "I need a {seat_class} ticket from {from_city} to {to_city} on {date}."),
         lambda a, rng: {"confirmation": f"FL{rng.randint(1000, 9999)}", "price": rng.randint(80, 1500)},
         "Booked: confirmation {r[confirmation]}, price {r[price]}.", "book flights", "travel"),
    Tool("find_hotels", "Search hotels in a city.",
         (Arg("city", "string", "City", _pick(CITIES)),
          Arg("max_price", "integer", "Highest nightly price", _int(50, 400), required=False),
          Arg("guests", "integer", "Number of guests", _int(1, 5), required=False)),
         ("Find hotels in {city}.", "Any hotels in {city} under {max_price} a night?",
          "Search hotels in {city} for {guests} guests."),
         lambda a, rng: [f"Hotel {rng.choice(['Aurora', 'Pine', 'Harbor', 'Central'])}", f"Inn {rng.choice(['Rosa', 'Blue', 'Mill'])}"],
         "I found: {result}.", "search hotels", "travel"),
    # -- sports, media, food
    Tool("team_last_score", "Score of a team's most recent match.",
         (Arg("team", "string", "Team name", _pick(TEAMS)),),
         ("How did the {team} do in their last game?", "What was the score of the {team}' last match?"),
         lambda a, rng: f"{rng.randint(0, 5)}-{rng.randint(0, 5)}",
         "The {team} last game ended {result}.", "look up sports results", "sports"),
    Tool("play_song", "Play a song on the speaker.",
         (Arg("title", "string", "Song title", _pick(SONGS)),
          Arg("volume", "integer", "Volume from 0 to 100", _int(10, 90), required=False)),
         ("Play {title}.", "Put on {title} at volume {volume}."),
         lambda a, rng: "playing",
         "Now playing {title}.", "play music", "media"),
    Tool("recommend_music", "Suggest songs of a genre.",
         (Arg("genre", "string", "Music genre", _pick(GENRES)), Arg("count", "integer", "How many", _int(2, 5), required=False)),
         ("Recommend some {genre} music.", "Give me {count} {genre} songs to listen to."),
         lambda a, rng: rng.sample(SONGS, 2),
         "You could try {result}.", "recommend music", "media"),
    Tool("recipe_search", "Find a recipe for a dish.",
         (Arg("dish", "string", "Dish name", _pick(FOODS)),
          Arg("vegetarian", "boolean", "Only vegetarian recipes", _pick([True]), required=False,
              say=lambda v: "vegetarian")),
         ("How do I make {dish}?", "Find me a {vegetarian} recipe for {dish}."),
         lambda a, rng: f"{a['dish']}: {rng.randint(4, 9)} ingredients, {rng.randint(15, 90)} minutes",
         "Here is a recipe: {result}.", "find recipes", "food"),
    Tool("calories_in", "Calories in a food portion.",
         (Arg("food", "string", "The food", _pick(FOODS)), Arg("grams", "integer", "Portion in grams", _int(50, 500))),
         ("How many calories are in {grams} grams of {food}?", "Calories for a {grams} g portion of {food}?"),
         lambda a, rng: rng.randint(60, 900),
         "{grams} g of {food} has about {result} calories.", "count calories", "food"),
    Tool("body_mass_index", "Body mass index from weight and height.",
         (Arg("weight_kg", "number", "Weight in kilograms", _int(45, 120)),
          Arg("height_m", "number", "Height in meters", _pick([1.55, 1.62, 1.7, 1.78, 1.85, 1.93]))),
         ("What is the BMI of someone who weighs {weight_kg} kg and is {height_m} m tall?",
          "Compute my BMI: {weight_kg} kilograms, {height_m} meters."),
         lambda a, rng: _r(a["weight_kg"] / a["height_m"] ** 2, 1),
         "The BMI is {result}.", "compute body mass index", "health"),
    # -- home, calendar, messages
    Tool("set_thermostat", "Set the thermostat of a room.",
         (Arg("room", "string", "Room", _pick(ROOMS)), Arg("temperature", "integer", "Target in degrees", _int(16, 26))),
         ("Set the {room} to {temperature} degrees.", "Make the {room} {temperature} degrees please."),
         lambda a, rng: "ok",
         "The {room} thermostat is set to {temperature} degrees.", "control the heating", "home"),
    Tool("toggle_lights", "Turn the lights of a room on or off.",
         (Arg("room", "string", "Room", _pick(ROOMS)), Arg("on", "boolean", "true to switch on", _pick([True, False]),
                                                             say=lambda v: "on" if v else "off")),
         ("Turn {on} the lights in the {room}.", "Switch the {room} lights {on}."),
         lambda a, rng: "done",
         "The {room} lights are now {on}.", "switch lights", "home"),
    Tool("create_event", "Add an event to the calendar.",
         (Arg("title", "string", "Event title", _pick(["dentist", "team sync", "yoga class", "parent meeting", "car service"])),
          Arg("date", "string", "Date YYYY-MM-DD", _date),
          Arg("time", "string", "Start time HH:MM", lambda rng: f"{rng.randint(8, 19):02d}:{rng.choice(['00', '30'])}")),
         ("Put {title} in my calendar on {date} at {time}.", "Schedule {title} for {date} at {time}."),
         lambda a, rng: {"event_id": rng.randint(100, 999)},
         "Added {title} on {date} at {time} (event {r[event_id]}).", "manage the calendar", "calendar"),
    Tool("send_email", "Send an email.",
         (Arg("to", "string", "Recipient address", lambda rng: rng.choice(PEOPLE).split()[0].lower() + "@example.com"),
          Arg("subject", "string", "Subject line", _pick(["lunch", "the report", "tomorrow's meeting", "invoice"])),
          Arg("body", "string", "Message text", _pick(["See you at noon.", "The report is attached.", "Running late."]))),
         ("Email {to} with subject '{subject}' saying '{body}'",
          "Send an email to {to}, subject {subject}, body: {body}"),
         lambda a, rng: "sent",
         "The email to {to} was sent.", "send email", "messages"),
    Tool("set_timer", "Start a countdown timer.",
         (Arg("minutes", "integer", "Length in minutes", _int(1, 90)), Arg("label", "string", "Name of the timer",
                                                                            _pick(["tea", "pasta", "laundry", "break"]), required=False)),
         ("Set a timer for {minutes} minutes.", "Start a {minutes} minute timer called {label}."),
         lambda a, rng: "started",
         "A {minutes}-minute timer is running.", "set timers", "home"),
    Tool("lookup_contact", "Find a person's phone number in the address book.",
         (Arg("name", "string", "Full name", _pick(PEOPLE)),),
         ("What's {name}'s phone number?", "Look up the number for {name}."),
         lambda a, rng: f"+1-555-{rng.randint(1000, 9999)}",
         "{name}'s number is {result}.", "look up contacts", "messages"),
    # -- science
    Tool("kinetic_energy", "Kinetic energy of a moving mass (joules).",
         (Arg("mass", "number", "Mass in kg", _int(1, 2000)), Arg("velocity", "number", "Speed in m/s", _int(1, 60))),
         ("What's the kinetic energy of a {mass} kg object moving at {velocity} m/s?",
          "Kinetic energy for mass {mass} and velocity {velocity}?"),
         lambda a, rng: _r(0.5 * a["mass"] * a["velocity"] ** 2),
         "The kinetic energy is {result} joules.", "compute kinetic energy", "physics"),
    Tool("average_speed", "Average speed from distance and time.",
         (Arg("distance_km", "number", "Distance in km", _int(5, 900)), Arg("hours", "number", "Time in hours", _int(1, 12))),
         ("What was my average speed if I drove {distance_km} km in {hours} hours?",
          "Average speed for {distance_km} kilometers over {hours} hours?"),
         lambda a, rng: _r(a["distance_km"] / a["hours"]),
         "The average speed was {result} km/h.", "compute speeds", "physics"),
    Tool("country_capital", "The capital city of a country.",
         (Arg("country", "string", "Country name", _pick(COUNTRIES)),),
         ("What is the capital of {country}?", "Which city is the capital of {country}?"),
         lambda a, rng: {"Chile": "Santiago", "Norway": "Oslo", "Kenya": "Nairobi", "Vietnam": "Hanoi", "Portugal": "Lisbon",
                         "Canada": "Ottawa", "Peru": "Lima", "Georgia": "Tbilisi", "Ghana": "Accra", "Finland": "Helsinki",
                         "Morocco": "Rabat", "Nepal": "Kathmandu", "Uruguay": "Montevideo", "Iceland": "Reykjavik",
                         "Latvia": "Riga", "Bhutan": "Thimphu"}[a["country"]],
         "The capital of {country} is {result}.", "look up capitals", "geography"),
    Tool("exchange_holidays", "Public holidays of a country in a year.",
         (Arg("country", "string", "Country", _pick(COUNTRIES)), Arg("year", "integer", "Year", _int(2024, 2027))),
         ("List the public holidays in {country} in {year}.", "Which holidays does {country} have in {year}?"),
         lambda a, rng: rng.randint(8, 16),
         "{country} has {result} public holidays in {year}.", "list holidays", "time"),
    # -- search and calculation: tools that take the question's own words
    Tool("search_docs", "Search the programming language reference and return the best matching section.",
         (Arg("query", "string", "Keywords to look up", _pick(list(DOC_TOPICS))),),
         ("What does {query} do in Python?", "How does {query} work? Look it up in the reference.",
          "Search the docs for {query}.", "Explain {query} to me using the documentation."),
         lambda a, rng: DOC_TOPICS[a["query"]],
         "According to the reference, {result}", "search the documentation", "search"),
    Tool("encyclopedia_lookup", "Look up a topic in the encyclopedia and return its summary.",
         (Arg("topic", "string", "The topic", _pick(list(ENCYCLOPEDIA))),),
         ("Who was {topic}?", "Tell me about {topic}.", "Look up {topic} in the encyclopedia."),
         lambda a, rng: ENCYCLOPEDIA[a["topic"]],
         "{result}", "look things up in an encyclopedia", "search"),
    Tool("calculate", "Evaluate an arithmetic expression with + - * / and parentheses.",
         (Arg("expression", "string", "The expression, e.g. '2 * (3 + 4)'", _expression),),
         ("What is {expression}?", "Calculate {expression}.", "Compute {expression} for me.", "How much is {expression}?"),
         lambda a, rng: _evaluate(a["expression"]),
         "{expression} = {result}.", "do arithmetic", "math"),
)

# Questions no tool here answers (answered in words): general knowledge, writing, advice.
GENERAL_QUESTIONS = (
    "Write a short poem about the sea.", "What is photosynthesis?", "Give me three tips for better sleep.",
    "Why is the sky blue?", "Tell me a joke about computers.", "What is the difference between a virus and a bacterium?",
    "Summarize the plot of Romeo and Juliet in two sentences.", "How do I boil an egg?",
    "What are the primary colors?", "Explain what a neural network is in simple words.", "Who painted the Mona Lisa?",
    "What is a haiku?", "Suggest a name for a pet turtle.", "How many legs does a spider have?",
    "What is the largest planet in the solar system?", "Give me an idea for a birthday gift for my sister.",
    "What does DNA stand for?", "Write one sentence encouraging a friend before an exam.", "What is gravity?",
    "Why do leaves change color in autumn?", "What is the boiling point of water at sea level?",
    "How can I become better at public speaking?", "What is an adjective?", "Name three famous composers.",
    "What is the speed of light?", "Hello! How are you today?", "Thanks for your help earlier.",
    "Can you explain what recursion means in programming?", "What is a prime number?",
    "Describe a rainbow to a child.", "What should I pack for a beach holiday?", "Who wrote Pride and Prejudice?",
)

# Twins: per tool, questions that state the tool's own argument values but ask for something it does not do (a
# sibling quantity, another time, advice), each with that task in a few words. Offered that tool, the right reply
# is no call. The tools that take the question's own words (search, arithmetic) have none: they could answer.
TWINS: dict[str, tuple[tuple[str, str], ...]] = {
    "get_current_weather": (("What was the weather like in {city} last winter?", "look up past weather"),
                            ("What's the best month to visit {city}?", "recommend when to travel"),
                            ("What's the air quality in {city} right now?", "check air quality")),
    "get_forecast": (("How much rain fell in {location} over the past {days} days?", "look up past rainfall"),
                     ("When does the sun rise in {location} tomorrow?", "tell sunrise times")),
    "city_population": (("How big is {city} in square kilometres?", "measure the area of cities"),
                        ("Who is the mayor of {city}?", "look up mayors")),
    "distance_between_cities": (("How long does the train take from {origin} to {destination}?", "look up train times"),
                                ("How much is a bus ticket from {origin} to {destination}?", "look up ticket prices")),
    "local_time": (("What time does the sun set in {city} today?", "tell sunset times"),
                   ("When do the shops close in {city}?", "look up opening hours")),
    "circle_area": (("What is the circumference of a circle with radius {radius}?", "compute circumferences"),
                    ("What is the volume of a sphere with radius {radius}?", "compute volumes of spheres")),
    "rectangle_perimeter": (("What is the area of a rectangle {width} wide and {length} long?", "compute areas"),
                            ("How long is the diagonal of a rectangle {width} wide and {length} long?",
                             "compute diagonals")),
    "hypotenuse": (("A right triangle has legs {a} and {b}. What is its area?", "compute the area of triangles"),
                   ("A right triangle has legs {a} and {b}. How big is its smallest angle?", "compute angles")),
    "greatest_common_divisor": (("What is the least common multiple of {x} and {y}?", "compute common multiples"),
                                ("What is the remainder when {x} is divided by {y}?", "compute remainders")),
    "least_common_multiple": (("What is the greatest common divisor of {first} and {second}?",
                               "compute common divisors"),
                              ("Is {first} divisible by {second}?", "test divisibility")),
    "factorial": (("What is the {n}th Fibonacci number?", "compute Fibonacci numbers"),
                  ("What is the square root of {n}?", "compute square roots")),
    "is_prime": (("What are the prime factors of {number}?", "factor numbers"),
                 ("What is the closest prime number below {number}?", "find nearby primes"),
                 ("Is {number} a perfect square?", "test for perfect squares")),
    "average": (("What is the standard deviation of {values}?", "compute standard deviations"),
                ("Which is the largest of {values}?", "find maxima")),
    "median_of": (("Find the mode of {numbers}.", "find modes"),
                  ("What is the range of {numbers}?", "compute ranges")),
    "power": (("What is the logarithm of {base} to the base {exponent}?", "compute logarithms"),
              ("What is the {exponent}th root of {base}?", "compute roots")),
    "compound_interest": (("What inflation should I expect over the next {years} years?", "forecast inflation"),
                          ("Which bank pays a rate of {rate} on savings?", "compare banks")),
    "loan_payment": (("Which bank offers a {amount} loan over {months} months?", "find loan offers"),
                     ("Will my credit score drop if I borrow {amount}?", "check credit scores")),
    "tip_amount": (("How should I split a {bill} bill between four friends?", "split bills"),
                   ("How much sales tax is included in a {bill} bill?", "compute sales tax")),
    "convert_temperature": (("Is {value} degrees a fever?", "judge body temperatures"),
                            ("What is the boiling point of olive oil in {to_unit}?", "look up boiling points")),
    "convert_length": (("How long does it take to walk {amount} {from_unit}?", "estimate walking times"),
                       ("How many calories do I burn running {amount} {from_unit}?", "estimate calories burned")),
    "convert_currency": (("What was the {source} to {target} exchange rate last year?", "look up past exchange rates"),
                         ("What fee does my bank charge to send {amount} {source} abroad?", "look up bank fees")),
    "days_between": (("Which public holidays fall between {start_date} and {end_date}?", "list holidays"),
                     ("What will the weather be between {start_date} and {end_date}?", "forecast weather")),
    "weekday_of": (("What happened in history on {date}?", "look up historical events"),
                   ("Is {date} a public holiday?", "check public holidays")),
    "is_leap_year": (("Who won the football world cup in {year}?", "look up sports history"),
                     ("On which day does Easter fall in {year}?", "compute Easter dates")),
    "translate_text": (("Is '{text}' grammatically correct?", "check grammar"),
                       ("How do you pronounce '{text}'?", "explain pronunciation")),
    "define_word": (("What rhymes with '{word}'?", "find rhymes"),
                    ("How many syllables does '{word}' have?", "count syllables")),
    "count_words": (("What is the mood of '{text}'?", "analyse sentiment"),
                    ("Is '{text}' spelled correctly?", "check spelling")),
    "get_stock_price": (("Who is the chief executive of {ticker}?", "look up company executives"),
                        ("Should I buy {ticker} shares?", "give investment advice")),
    "track_package": (("Can I change the delivery address of package {tracking_number}?",
                       "change delivery addresses"),
                      ("How do I return package {tracking_number}?", "arrange returns")),
    "product_price": (("What do reviewers say about the {product}?", "look up reviews"),
                      ("Is the {product} waterproof?", "look up product details")),
    "order_status": (("Cancel order {order_id}.", "cancel orders"),
                     ("I want a refund for order {order_id}.", "issue refunds")),
    "book_flight": (("How long is the flight from {from_city} to {to_city}?", "look up flight durations"),
                    ("Do I need a visa to fly from {from_city} to {to_city}?", "check visa rules")),
    "find_hotels": (("What are the best restaurants in {city}?", "find restaurants"),
                    ("Rent me a car in {city}.", "rent cars")),
    "team_last_score": (("When do the {team} play next?", "look up fixtures"),
                        ("Who coaches the {team}?", "look up coaches")),
    "play_song": (("Who wrote the song {title}?", "look up songwriters"),
                  ("Show me the lyrics of {title}.", "show lyrics")),
    "recommend_music": (("Are there any {genre} concerts near me this week?", "find concerts"),
                        ("How did {genre} music begin?", "explain music history")),
    "recipe_search": (("Find a restaurant that serves {dish}.", "find restaurants"),
                      ("Order {dish} for delivery.", "order food")),
    "calories_in": (("How much protein is in {grams} grams of {food}?", "count protein"),
                    ("How much do {grams} grams of {food} cost?", "look up food prices")),
    "body_mass_index": (("How many calories a day should someone who weighs {weight_kg} kg and is {height_m} m "
                         "tall eat?", "plan diets"),
                        ("What is the body fat percentage of someone who weighs {weight_kg} kg and is {height_m} m "
                         "tall?", "estimate body fat")),
    "set_thermostat": (("What is the temperature in the {room} right now?", "read room temperatures"),
                       ("Open the windows in the {room}.", "open windows")),
    "toggle_lights": (("Change the lights in the {room} to blue.", "change light colours"),
                      ("How much power do the lights in the {room} use?", "measure power use")),
    "create_event": (("Who is invited to the {title} on {date}?", "list invitees"),
                     ("Cancel the {title} on {date}.", "cancel events")),
    "send_email": (("Did {to} reply to my email about '{subject}'?", "read replies"),
                   ("Call {to} about '{subject}'.", "make phone calls")),
    "set_timer": (("Set an alarm for {minutes} past seven tomorrow.", "set alarms"),
                  ("How long is left on the {minutes} minute timer?", "read timers")),
    "lookup_contact": (("When is {name}'s birthday?", "look up birthdays"),
                       ("Send {name} a text message saying I'm late.", "send text messages")),
    "kinetic_energy": (("What's the momentum of a {mass} kg object moving at {velocity} m/s?", "compute momentum"),
                       ("What's the potential energy of a {mass} kg object raised {velocity} m?",
                        "compute potential energy")),
    "average_speed": (("How much fuel will I use driving {distance_km} km?", "estimate fuel use"),
                      ("What is the acceleration of a car that reaches {distance_km} km/h in {hours} seconds?",
                       "compute accelerations")),
    "country_capital": (("What language is spoken in {country}?", "look up languages"),
                        ("What currency does {country} use?", "look up currencies")),
    "exchange_holidays": (("What was the economy of {country} like in {year}?", "look up economic data"),
                          ("Who led {country} in {year}?", "look up heads of state")),
}
