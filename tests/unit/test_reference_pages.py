"""docs/reference/ is generated from the code that defines it (devtools/reference_pages.py):
each page must be exactly what the code generates now, so a setting, CLI flag or Kafka API
added without regenerating the pages fails here."""

from __future__ import annotations

from devtools.reference_pages import REFERENCE_DIR, pages


def test_each_reference_page_is_what_the_code_generates():
    for path, text in pages().items():
        assert path.exists(), f"{path.name} is missing: python -m devtools.readme_tables"
        assert path.read_text() == text, (
            f"docs/reference/{path.name} differs from the code: python -m devtools.readme_tables"
        )


def test_the_pages_hold_every_setting_flag_and_api():
    cli = (REFERENCE_DIR / "cli.md").read_text()
    # Subcommands two levels down, and flags Kafka users look for.
    for expected in ("## seglog groups reset-offsets", "--by-duration", "## seglog topics create"):
        assert expected in cli, expected
    settings = (REFERENCE_DIR / "settings.md").read_text()
    assert "## The gateway" in settings and "## The storage node" in settings
    assert "`SEGLOG_SESSION_TIMEOUT_MS`" in settings
    apis = (REFERENCE_DIR / "kafka-apis.md").read_text()
    assert "| Produce | 0 |" in apis and "| DescribeTopicPartitions |" in apis
