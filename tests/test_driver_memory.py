"""NIGHTJAR_DRIVER_MEMORY: the driver heap a SigmaHQ-sized rule set needs is set in one typed place; a value that
is not a JVM size is a one-line usage error naming the variable, not a JVM that fails to start."""

from __future__ import annotations

import pytest

from core.config import DEFAULT_DRIVER_MEMORY, ENV_DRIVER_MEMORY, settings_from_env
from core.errors import UserError


def test_the_driver_heap_comes_from_the_environment_or_the_default() -> None:
    assert settings_from_env({}).driver_memory == DEFAULT_DRIVER_MEMORY
    assert settings_from_env({ENV_DRIVER_MEMORY: " 8G "}).driver_memory == "8g"
    assert settings_from_env({ENV_DRIVER_MEMORY: "8192m"}).driver_memory == "8192m"


@pytest.mark.parametrize("bad", ["lots", "8", "0g", "g", "-1g", "8gb"])
def test_a_size_the_jvm_would_refuse_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UserError, match=f"{ENV_DRIVER_MEMORY} '{bad}' must be a JVM memory size") as caught:
        settings_from_env({ENV_DRIVER_MEMORY: bad})
    assert caught.value.exit_code == 2
