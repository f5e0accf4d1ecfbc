"""Secrets never reach what detcheck writes: argv values of secret flags, secret environment
values, and any echo of them in server output."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL", re.I)  # PASS: PASSWORD, PASSWD, DB_PASS
# Flags are matched by whole word: --api-key and --hf-token are secret, --max-total-tokens is not.
_SECRET_FLAG_WORDS = {"token", "key", "secret", "password", "passwd", "pass", "passphrase", "apikey",
                      "credential", "credentials"}
# detcheck's option whose values reach the server's argv; argparse also takes any unambiguous
# prefix of it (`--server-a=…`).
_SERVER_ARG = "--server-arg"
REDACTED = "<redacted>"
# `scheme://user:password@host`: the credentials of an index URL (`--env-pip-arg=--index-url=…`).
_URL_CREDENTIALS = re.compile(r"://([^/@\s]+)@")


def is_secret(name: str) -> bool:
    """Environment variable names: any mention of TOKEN, KEY, SECRET, PASS or CREDENTIAL."""
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


def secret_values(env: dict[str, str], argv: Sequence[str] = ()) -> tuple[str, ...]:
    """The values to mask wherever they appear: secret-named variables' values and the values
    of secret flags (a server may echo its arguments or environment into its log)."""
    values = {v for k, v in env.items() if is_secret(k)}
    values |= {arg for arg, masked in zip(argv, redact_argv(list(argv))) if masked == REDACTED}
    values |= {arg.partition("=")[2] for arg, masked in zip(argv, redact_argv(list(argv)))
               if masked.endswith("=" + REDACTED)}
    # Longest first, so a secret that contains another is masked whole; short values would
    # mask ordinary words.
    return tuple(sorted((v for v in values if len(v) >= 4), key=len, reverse=True))


def url_credentials(words: Sequence[str]) -> tuple[str, ...]:
    """The `user:password` parts of the URLs among `words`, to mask wherever they appear."""
    # Short ones (`git@`) are user names, and masking them would mask ordinary words.
    return tuple(m.group(1) for word in words for m in _URL_CREDENTIALS.finditer(word) if len(m.group(1)) >= 4)


def environment_secrets(env: dict[str, str], argv: Sequence[str] = ()) -> tuple[str, ...]:
    """Everything of a process's environment and arguments that must not come back through
    its output: secret-named values, secret flags' values, and URL credentials in any value
    (`HTTPS_PROXY=https://user:pw@proxy`, an index URL)."""
    return (*secret_values(env, argv), *url_credentials([*env.values(), *argv]))


def scrub(text: str, secrets: Sequence[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_file(path: Path, secrets: Sequence[str]) -> None:
    """A log the harness keeps, rewritten without the secrets (temp file + rename)."""
    if not secrets or not path.is_file():
        return
    text = path.read_text(errors="replace")
    clean = scrub(text, secrets)
    if clean != text:
        tmp = path.with_name(f".{path.name}.scrub")
        tmp.write_text(clean)
        os.replace(tmp, path)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """What may be written to results: secret-named values never leave the process, nor the
    credentials of a URL in any other value."""
    return {k: (REDACTED if is_secret(k) else scrub(v, url_credentials([v]))) for k, v in env.items()}


def redact_command(argv: Sequence[str]) -> list[str]:
    """detcheck's own command line as recorded: secrets passed through `--server-arg` masked
    (`--server-arg=--api-key --server-arg=sk-…`, the two-word form, or after `--`)."""
    server_args: list[str] = []
    words = iter(argv)
    for word in words:
        option, eq, value = word.partition("=")
        if word == "--":
            server_args += words
        elif len(option) > 2 and _SERVER_ARG.startswith(option):
            server_args.append(value if eq else next(words, ""))
    secrets = (*secret_values({}, server_args), *url_credentials(argv))
    return [scrub(word, secrets) for word in redact_argv(list(argv))]
