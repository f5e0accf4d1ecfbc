"""Secrets never reach what detcheck writes: argv values of secret flags (by name, or as the
server's `--help` describes them), secret environment values (by name, or by a value that looks
like a credential whatever its name), and any echo of them in server output."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL", re.I)  # PASS: PASSWORD, PASSWD, DB_PASS
# Words of a name (split at `_`) that make it secret where they are a whole word: as a part of a
# longer word they are not (GIT_AUTHOR_NAME, PATH, PWD alone: the working directory).
_SECRET_NAME_WORDS = {"AUTH", "OAUTH", "AUTHORIZATION", "PAT", "PWD", "COOKIE", "COOKIES"}
# Last words of a name that make it secret (DB_CRED, APP_SESSION, GPG_PRIVATE, RELEASE_SIGNING); as
# the first word they name a place or a format (SESSION_DIR, PRIVATE_DIR, SIGNING_FORMAT).
_SECRET_LAST_WORDS = {"CRED", "CREDS", "SESSION", "PRIVATE", "SIGNING"}
_NOT_SECRET_NAMES = {"PWD"}
# Values that are credentials by their form, whatever their variable or flag is called: the
# issuers' token formats (GitHub, Hugging Face, OpenAI/Anthropic, AWS, Slack, GitLab), JSON web
# tokens, PEM private keys, an HTTP authorization header's value.
_CREDENTIAL_VALUE = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}|hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]{8,}|(?<=Basic )[A-Za-z0-9+/=]{8,}")
# Secrets inside a longer value, the secret the first group: a connection string's or a URL
# query's password (`Server=db;Password=…;`, `?password=…&`; a value that starts with `/` is a
# working directory, `PWD=/home/…`), a netrc `password` token (one line or a block of them).
_CREDENTIAL_IN_TEXT = (
    re.compile(r"(?i)(?:^|[;&?,\s])(?:password|passwd|pwd)\s*=\s*((?!/)[^;&\s'\"]+)"),
    re.compile(r"(?im)(?:^[ \t]*|\b(?:machine|login|account)[ \t]+\S+[ \t]+)password[ \t]+(\S+)"),
)
# What a server's `--help` says of a flag whose value is a secret, its name aside.
_SECRET_HELP = re.compile(r"\b(?:api[ -]?keys?|secrets?|passwords?|passphrases?|credentials?|private keys?"
                          r"|(?:access|auth|authentication|bearer) tokens?)\b", re.I)
# An option's entry in argparse's help: its line, and the indented lines of its description.
_HELP_OPTION = re.compile(r"^ {1,8}(?:-\w[ ,]+)*(--[a-z0-9][a-z0-9-]*)")
# Flags are matched by whole word: --api-key and --hf-token are secret, --max-total-tokens is not.
_SECRET_FLAG_WORDS = {"token", "key", "secret", "password", "passwd", "pass", "passphrase", "apikey",
                      "credential", "credentials", "cred", "creds"}
# detcheck's option whose values reach the server's argv; argparse also takes any unambiguous
# prefix of it (`--server-a=…`).
_SERVER_ARG = "--server-arg"
REDACTED = "<redacted>"
# `scheme://user:password@host`: the credentials of an index URL (`--env-pip-arg=--index-url=…`).
_URL_CREDENTIALS = re.compile(r"://([^/@\s]+)@")


def is_secret(name: str) -> bool:
    """Environment variable names: any mention of TOKEN, KEY, SECRET, PASS or CREDENTIAL, a
    word AUTH, PAT, PWD, COOKIE of it (MY_AUTH, GH_PAT, DB_PWD, SESSION_COOKIE), or a last word
    CRED, SESSION, PRIVATE, SIGNING (DB_CRED, APP_SESSION)."""
    words = name.upper().split("_")
    return (bool(_SECRET.search(name)) or bool(set(words) & _SECRET_NAME_WORDS) and name.upper() not in _NOT_SECRET_NAMES
            or len(words) > 1 and words[-1] in _SECRET_LAST_WORDS)


def credential_tokens(text: str) -> list[str]:
    """The parts of `text` that are credentials by their form (a GitHub token, a JWT, …) or by
    where they stand (a connection string's `Password=`, a netrc `password`)."""
    return [*(m.group(0) for m in _CREDENTIAL_VALUE.finditer(text)),
            *(m.group(1) for pattern in _CREDENTIAL_IN_TEXT for m in pattern.finditer(text))]


def is_secret_flag(flag: str, secret_flags: Collection[str] = ()) -> bool:
    """A flag whose value is secret: by a word of its name, or as `secret_flags` (those the
    server's `--help` describes as secrets: `help_secret_flags`) say."""
    return flag in secret_flags or any(word in _SECRET_FLAG_WORDS
                                       for word in re.split(r"[-_]+", flag.lower().lstrip("-")))


def help_secret_flags(help_text: str) -> frozenset[str]:
    """The flags whose description in an argparse `--help` says their value is a secret (a
    password, an API key, an access token), whatever they are called."""
    found, flag, words = set(), None, []
    for line in [*help_text.splitlines(), ""]:
        option = _HELP_OPTION.match(line)
        if option or not line.strip():  # an entry ends where the next begins, or at a blank line
            if flag and _SECRET_HELP.search(" ".join(words)):
                found.add(flag)
            flag, words = (option.group(1), [line[option.end():]]) if option else (None, [])
        elif flag:
            words.append(line)
    return frozenset(found)


def redact_argv(argv: list[str], secret_flags: Collection[str] = ()) -> list[str]:
    """`--api-key X` / `--hf-token=X`: the value after a secret flag is masked; so is any word
    that is a credential by its form."""
    out = []
    for i, arg in enumerate(argv):
        flag, eq, _value = arg.partition("=")
        previous = argv[i - 1] if i > 0 else ""
        if arg.startswith("--") and eq and is_secret_flag(flag, secret_flags):
            out.append(f"{flag}={REDACTED}")
        elif previous.startswith("--") and "=" not in previous and is_secret_flag(previous, secret_flags) \
                and not arg.startswith("--"):
            out.append(REDACTED)
        else:
            out.append(scrub(arg, credential_tokens(arg)))
    return out


def secret_values(env: dict[str, str], argv: Sequence[str] = (), secret_flags: Collection[str] = ()) -> tuple[str, ...]:
    """The values to mask wherever they appear: secret-named variables' values, the values of
    secret flags, and whatever is a credential by its form in any value or argument (a server
    may echo its arguments or environment into its log)."""
    masked_argv = redact_argv(list(argv), secret_flags)
    values = {v for k, v in env.items() if is_secret(k)}
    values |= {arg for arg, masked in zip(argv, masked_argv) if masked == REDACTED}
    values |= {arg.partition("=")[2] for arg, masked in zip(argv, masked_argv)
               if masked.endswith("=" + REDACTED)}
    values |= {token for text in (*env.values(), *argv) for token in credential_tokens(text)}
    # Longest first, so a secret that contains another is masked whole; short values would
    # mask ordinary words.
    return tuple(sorted((v for v in values if len(v) >= 4), key=len, reverse=True))


def url_credentials(words: Sequence[str]) -> tuple[str, ...]:
    """The `user:password` parts of the URLs among `words`, to mask wherever they appear."""
    # Short ones (`git@`) are user names, and masking them would mask ordinary words.
    return tuple(m.group(1) for word in words for m in _URL_CREDENTIALS.finditer(word) if len(m.group(1)) >= 4)


def environment_secrets(env: dict[str, str], argv: Sequence[str] = (),
                        secret_flags: Collection[str] = ()) -> tuple[str, ...]:
    """Everything of a process's environment and arguments that must not come back through
    its output: secret-named values, secret flags' values, credentials by their form, and URL
    credentials in any value (`HTTPS_PROXY=https://user:pw@proxy`, an index URL)."""
    return (*secret_values(env, argv, secret_flags), *url_credentials([*env.values(), *argv]))


def scrub(text: str, secrets: Sequence[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_all(value: Any, secrets: Sequence[str]) -> Any:
    """`value` (strings, lists and dicts of them, as a recorded option is) with every secret masked."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, (list, tuple)):
        return [scrub_all(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: scrub_all(v, secrets) for k, v in value.items()}
    return value


_SCRUB_BLOCK = 1 << 20  # characters of a log scrubbed at a time


def scrub_file(path: Path, secrets: Sequence[str]) -> None:
    """A log the harness keeps, rewritten without the secrets (temp file + rename), a block at
    a time: a server's log may run to gigabytes. The last characters of each block, where a
    secret the next block ends may begin, are scrubbed again with the next."""
    if not secrets or not path.is_file():
        return
    carry = max(len(s) for s in secrets) - 1
    tmp = path.with_name(f".{path.name}.scrub")
    with open(path, errors="replace", newline="") as src, open(tmp, "w", newline="") as dst:
        pending = ""
        while block := src.read(_SCRUB_BLOCK):
            clean = scrub(pending + block, secrets)
            cut = max(0, len(clean) - carry)
            dst.write(clean[:cut])
            pending = clean[cut:]
        dst.write(pending)
    os.replace(tmp, path)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """What may be written to results: secret-named values never leave the process, nor the
    credentials of a URL in any other value."""
    return {k: (REDACTED if is_secret(k) else scrub(v, (*url_credentials([v]), *credential_tokens(v))))
            for k, v in env.items()}


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
