"""Secrets never reach results: secret-named env values and flag values are masked."""

from __future__ import annotations

from harness.redaction import redact_argv, redact_env


def test_secret_flags_masked_and_token_counts_kept():
    argv = ["--max-total-tokens", "100", "--api-key", "s3cr3t", "--hf-token=abc",
            "--speculative-num-draft-tokens", "4", "--port", "1"]
    assert redact_argv(argv) == ["--max-total-tokens", "100", "--api-key", "<redacted>",
                                 "--hf-token=<redacted>", "--speculative-num-draft-tokens", "4",
                                 "--port", "1"]


def test_secret_env_names_masked():
    env = {"HF_TOKEN": "x", "OPENAI_API_KEY": "y", "MY_SECRET": "z", "PATH": "/bin"}
    assert redact_env(env) == {"HF_TOKEN": "<redacted>", "OPENAI_API_KEY": "<redacted>",
                               "MY_SECRET": "<redacted>", "PATH": "/bin"}


def test_secret_values_scrubbed_from_server_output():
    from harness.redaction import scrub, secret_values

    env = {"HF_TOKEN": "hf_abcdef123", "PATH": "/usr/bin", "SHORT_KEY": "ab"}
    argv = ["--api-key", "sk-live-999", "--admin-api-key=adm-777", "--max-total-tokens", "4096"]
    text = "loading with token hf_abcdef123 from /usr/bin; args sk-live-999 adm-777 4096"
    assert scrub(text, secret_values(env, argv)) == \
        "loading with token <redacted> from /usr/bin; args <redacted> <redacted> 4096"


def test_secret_env_names_of_the_broader_set_masked_and_look_alikes_kept():
    secret = ["MY_AUTH", "GH_PAT", "DB_PWD", "SESSION_COOKIE", "OAUTH_CLIENT", "X_AUTHORIZATION"]
    plain = ["PWD", "OLDPWD", "PATH", "GIT_AUTHOR_NAME", "PATCH_LEVEL", "COOKIECUTTER_HOME"]
    masked = redact_env({name: "value" for name in [*secret, *plain]})
    assert [name for name in secret if masked[name] != "<redacted>"] == []
    assert [name for name in plain if masked[name] != "value"] == []


def test_a_value_that_is_a_credential_by_its_form_is_masked_whatever_its_name():
    from harness.redaction import scrub, secret_values

    token, jwt = "ghp_" + "a1" * 18, "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4"
    env = {"BUILD_SETTING": token, "HEADERS": f"Authorization: Bearer {jwt}", "MODEL": "tiny-llama"}
    assert redact_env(env) == {"BUILD_SETTING": "<redacted>", "HEADERS": "Authorization: Bearer <redacted>",
                               "MODEL": "tiny-llama"}
    assert redact_argv(["--model-path", "m", "--opt", token]) == ["--model-path", "m", "--opt", "<redacted>"]
    assert scrub(f"echo {token} and {jwt}", secret_values(env)) == "echo <redacted> and <redacted>"


HELP = """options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH
                        The path of the model weights.
  --hub-login LOGIN     The password of the model hub
                        account.
  --admin-api-key ADMIN_API_KEY
                        Set the API key of the admin endpoints.
  --max-total-tokens MAX_TOTAL_TOKENS
                        The maximum number of tokens in the memory pool.
  --tokenizer-path TOKENIZER_PATH
                        The path of the tokenizer.
"""


def test_flags_the_help_calls_secrets_are_masked_whatever_they_are_called():
    from harness.capabilities import Capabilities

    caps = Capabilities.parse(HELP)
    assert caps.secret_flags == {"--hub-login", "--admin-api-key"}
    assert redact_argv(["--hub-login", "pw1", "--hub-login=pw2", "--max-total-tokens", "9"], caps.secret_flags) == \
        ["--hub-login", "<redacted>", "--hub-login=<redacted>", "--max-total-tokens", "9"]


def test_a_kept_log_is_scrubbed_a_block_at_a_time_secrets_across_blocks_included(tmp_path, monkeypatch):
    from harness import redaction

    monkeypatch.setattr(redaction, "_SCRUB_BLOCK", 7)  # every secret below crosses a block's end
    log = tmp_path / "server.log"
    log.write_text("abc SECRET-ONE def SECRET-TWO-LONG gh\nSECRET-ONE\nend\n")
    redaction.scrub_file(log, ("SECRET-TWO-LONG", "SECRET-ONE"))
    assert log.read_text() == "abc <redacted> def <redacted> gh\n<redacted>\nend\n"
