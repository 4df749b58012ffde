"""What the third-party client tests share: the call limit and the structured answer they ask for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

TIMEOUT_S = 60.0  # every client call's limit: a server that stopped answering fails the test


class Person(BaseModel):
    """A person."""

    name: str = Field(max_length=6)
    age: int = Field(ge=18, le=99)
    role: Literal["admin", "user", "guest"]
