"""speedtronic.errors: the one cap every warning goes through."""

from __future__ import annotations

import warnings

from speedtronic.errors import MAX_WARNING_BYTES, SpeedtronicWarning, capped, warn_at_caller
from speedtronic.processors import DEFAULT_MAX_LINE_BYTES


def size(text: str) -> int:
    return len(text.encode("utf-8", "backslashreplace"))


class TestCapped:
    def test_the_cap_is_the_records_cap(self) -> None:
        """A warning may be as long as a record's line, no longer."""
        assert MAX_WARNING_BYTES == DEFAULT_MAX_LINE_BYTES

    def test_a_message_that_fits_is_unchanged(self) -> None:
        """Up to MAX_WARNING_BYTES bytes of UTF-8, the message is returned as it is."""
        for message in ("", "disk full", "x" * MAX_WARNING_BYTES, "é" * (MAX_WARNING_BYTES // 2)):
            assert capped(message) is message

    def test_a_longer_message_keeps_its_start_and_end_within_the_cap(self) -> None:
        """10 MB: the start (what failed), the last 200 characters (a count) and how much was cut."""
        message = "speedtronic hook 'h' failed: ValueError: " + "x" * 10_000_000 + "; 3 lost so far"
        short = capped(message)
        assert size(short) <= MAX_WARNING_BYTES
        assert short.startswith("speedtronic hook 'h' failed: ValueError: xxx")
        assert short.endswith("xxx; 3 lost so far")
        assert f"of {size(message):,} bytes>" in short
        assert capped(message[: MAX_WARNING_BYTES + 1]) != message[: MAX_WARNING_BYTES + 1]

    def test_multibyte_characters_are_never_cut_in_half(self) -> None:
        """A cut through a 4-byte character drops it whole: the result is valid text, within the cap."""
        for message in ("🙂" * 20_000, "a" + "🙂" * 20_000, "ab" + "é" * 30_000 + "c"):
            short = capped(message)
            assert size(short) <= MAX_WARNING_BYTES
            assert "\ufffd" not in short
            assert short.endswith(message[-200:])

    def test_warn_at_caller_caps(self) -> None:
        """Every warning speedtronic issues through warn_at_caller is capped."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_at_caller("boom " * 1_000_000, SpeedtronicWarning)
        assert len(caught) == 1
        assert size(str(caught[0].message)) <= MAX_WARNING_BYTES
        assert str(caught[0].message).startswith("boom boom")
