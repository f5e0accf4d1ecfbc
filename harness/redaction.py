"""Secrets never reach what detcheck writes: argv values of secret flags, secret environment
values, and any echo of them in server output."""

from __future__ import annotations

import re

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.I)
# Flags are matched by whole word: --api-key and --hf-token are secret, --max-total-tokens is not.
_SECRET_FLAG_WORDS = {"token", "key", "secret", "password", "apikey"}
REDACTED = "<redacted>"


def is_secret(name: str) -> bool:
    """Environment variable names: any mention of TOKEN, KEY, SECRET or PASSWORD."""
    return bool(_SECRET.search(name))


def is_secret_flag(flag: str) -> bool:
    return any(word in _SECRET_FLAG_WORDS for word in re.split(r"[-_]+", flag.lower().lstrip("-")))


def redact_argv(argv: list[str]) -> list[str]:
    """`--api-key X` / `--hf-token=X`: the value after a secret-named flag is masked."""
    out = []
    for i, arg in enumerate(argv):
        flag, eq, _value = arg.partition("=")
        previous = argv[i - 1] if i > 0 else ""
        if arg.startswith("--") and eq and is_secret_flag(flag):
            out.append(f"{flag}={REDACTED}")
        elif previous.startswith("--") and "=" not in previous and is_secret_flag(previous) \
                and not arg.startswith("--"):
            out.append(REDACTED)
        else:
            out.append(arg)
    return out


def scrub_secrets(text: str, env: dict[str, str]) -> str:
    """Server output copied into results (log tails, error reasons) with the values of
    secret-named variables masked, in case a server echoes its environment or a token."""
    for name, value in env.items():
        if is_secret(name) and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """What may be written to results: secret-named values never leave the process."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}
