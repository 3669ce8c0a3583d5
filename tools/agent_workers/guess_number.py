"""Guess-a-number: a multi-turn environment for docs/tools.md and the environment tests.

What TRL's GRPOTrainer(environment_factory=GuessNumber) would take. Each rollout gets its own instance:
reset(**row) reads the secret from the dataset row ("secret") and returns the first observation,
guess() is the one tool (it answers "higher", "lower" or "correct"), get_reward() scores the rollout
(1.0 when found, less for every extra guess, 0.0 when never found).

    [environment]
    command = "python3 tools/agent_workers/rayless_agent.py environment tools/agent_workers/guess_number.py GuessNumber"
"""


class GuessNumber:
    def __init__(self):
        self.secret = 0
        self.guesses = 0
        self.found = False

    def reset(self, secret=50, **row):
        self.secret = int(secret)
        self.guesses = 0
        self.found = False
        return " Guess my number: it lies between 1 and 100."

    def guess(self, number: int) -> str:
        """Tries a number.

        Args:
            number: The number to try.

        Returns:
            "higher" when the secret is larger, "lower" when smaller, "correct" when found.
        """
        self.guesses += 1
        if number < self.secret:
            return "higher"
        if number > self.secret:
            return "lower"
        self.found = True
        return "correct"

    def get_reward(self) -> float:
        if not self.found:
            return 0.0
        return 1.0 / self.guesses

