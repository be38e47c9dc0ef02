"""The one error type users see: a one-line cause and fix, exit code 2."""


class NodemapError(Exception):
    """An error the user can act on. The CLI prints it on one line, exit 2.

    Say the cause and the fix: "GPU 3 is not visible: CUDA_VISIBLE_DEVICES=0,1
    hides it (unset it or pick --gpus 0,1)".
    """

    exit_code = 2


class InputError(NodemapError):
    """A file or value given by the user is unreadable or malformed."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
