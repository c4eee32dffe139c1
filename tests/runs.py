"""The outcome of one run of the command line, in-process or as a subprocess."""

from dataclasses import dataclass


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def everything(self) -> str:
        return self.out + self.err

    @property
    def err_lines(self) -> list:
        return self.err.splitlines()
