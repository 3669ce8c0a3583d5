"""Functions whose JSON schemas tools/agent_workers/rayless_agent.py must write as transformers'
get_json_schema does (tests/data/agent/schemas.json, made by tools/make_agent_golden.py)."""
import enum
from typing import Any, Literal, Optional, Union


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


def plain(x: int, y: float, name: str, flag: bool = False):
    """Four basic types, one with a default.

    Args:
        x: An integer.
        y: A float.
        name: A string.
        flag: A boolean.
    """


def typed_containers(items: list[int], pair: tuple[int, str], table: dict[str, float], anything: Any, bare: list) -> dict:
    """Containers of types.

    Args:
        items: A list of integers.
        pair: A pair (int, str).
        table: A mapping to floats.
        anything: Any value at all.
        bare: A list of anything.

    Returns:
        A dictionary.
    """


def unions(a: Optional[int], b: Union[int, str], c: int | None = None, d: Union[list[int], str] = "x"):
    """Unions and optionals.

    Args:
        a: Maybe an integer.
        b: An integer or a string.
        c: Another optional integer.
        d: A list of integers or a string.
    """


def reordered(a: Union[str, int], b: "float | int"):
    """Unions written out of order, one as a string annotation.

    Args:
        a: A string or an integer.
        b: A float or an integer.
    """


def deeper(path: str, retries: int = 3):
    """Reads a file.

    Args:
        path: Where the file is.
            Note: relative to the working directory, a deeper line that looks like an argument.
        retries: How often to try.
    """


def choices(mode: str, colour: Colour, level: Literal["low", "high", 3]):
    """Choices three ways: in the docstring, an Enum, a Literal.

    Args:
        mode: How to run (choices: ["fast", "slow"])
        colour: A colour.
        level: A level.
    """


def multiline(query: str, limit: int = 10) -> str:
    """Searches for things. The description
    spans two lines.

    Args:
        query: What to look for; the description
            goes on on a deeper line.
        limit (int): How many results, with its type in parentheses.

    Returns:
        The results, one per line.

    Raises:
        ValueError: never.
    """


def no_arguments() -> int:
    """Takes nothing and says so."""


class Holder:
    def method(self, value: float) -> float:
        """A method: self is not a parameter.

        Args:
            value: A number.
        """
        return value


FUNCTIONS = [plain, typed_containers, unions, reordered, deeper, choices, multiline, no_arguments, Holder().method]
