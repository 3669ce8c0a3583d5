"""Calculator tools for the worked example of docs/tools.md and the tool tests.

The functions are what TRL's GRPOTrainer(tools=[add, multiply, divide]) would take; rayless serves them
from a worker process:

    [tools.calculator]
    command = "python3 tools/agent_workers/rayless_agent.py tools tools/agent_workers/calculator.py"
"""


def add(a: int, b: int) -> int:
    """Adds two whole numbers.

    Args:
        a: The first number.
        b: The second number.

    Returns:
        The sum a + b.
    """
    return a + b


def multiply(a: float, b: float) -> float:
    """Multiplies two numbers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


def divide(a: float, b: float) -> float:
    """Divides one number by another; dividing by zero raises an error, which the model sees.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b

