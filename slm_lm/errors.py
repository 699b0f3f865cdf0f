"""Errors raised for bad user input."""


class InputError(ValueError):
    """Bad user input; the message names the file, line or index and the problem.

    `index` is the 0-based position of the offending item in the caller's input, when there is one.
    """

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index
