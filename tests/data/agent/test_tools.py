"""Tools that misbehave, for the tool-loop tests (tests/agent/test_agent_rollout.cpp)."""
import os
import time


def echo(text: str) -> str:
    """Answers with its argument.

    Args:
        text: What to answer.
    """
    return text


async def shout(text: str) -> str:
    """An async tool: TRL appends its result after the turn's other results.

    Args:
        text: What to shout.
    """
    return text.upper()


def sleep(seconds: float) -> str:
    """Sleeps, longer than the worker's timeout_s in the tests.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "woke"


def die(code: int) -> str:
    """Ends the worker process at once, as a crashing tool would.

    Args:
        code: The exit status.
    """
    os._exit(code)
