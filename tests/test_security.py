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
