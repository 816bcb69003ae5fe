"""``redact_text`` against adversarial text: every pattern it knows, its prefix repeated, 1k to 100k chars.

For each credential form ``redact_text`` knows (``sk-`` keys, JWTs, Bearer/Basic values, PEM keys,
GitHub/AWS/Hugging Face/Slack/Google/GitLab/Stripe keys, URL passwords, ``key=value`` with a secret
key, Python literals with a prefix), text made of its prefix followed by each of a dozen separators,
repeated (``sk-sk-sk-...``, ``eyJ-eyJ-...``, ``eyJa.eyJa....``), and its prefix followed by one long
run (``sk-aaaa...``), at 1,000, 10,000 and 100,000 characters. Each is timed per character against
ordinary text (traceback lines) of the same size in the same run; the worst ratio of each form is
printed, with the machine's load. Goal: at most 10x ordinary text per character, at every size (the
cost is linear: a ratio that grew with the size would be super-linear).

    python benchmarks/redact_fuzz.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from speedtronic.processors.redact import redact_text  # the checkout's, not an installed one

ORDINARY = 'File "/home/u/train.py", line 12, in main\nValueError: lr=0.1 at step 7 '

PREFIXES: dict[str, tuple[str, ...]] = {
    "sk- (OpenAI/Anthropic)": ("sk-", "sk-a", "sk-1"),
    "eyJ (JWT)": ("eyJ", "eyJa.", "eyJaa.aa", "eyJaa.aa."),
    "Bearer": ("Bearer ", "BEARER\t", "Bearer a"),
    "Basic": ("Basic ", "Basic QUJD", "Basic dTpw"),
    "PEM private key": ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ", "-----END PRIVATE KEY-----"),
    "Stripe rk_/sk_": ("rk_live_", "sk_test_"),
    "GitHub ghp_": ("ghp_", "gho_a"),
    "GitHub github_pat_": ("github_pat_",),
    "AWS AKIA/ASIA": ("AKIA", "ASIAA"),
    "Hugging Face hf_": ("hf_", "hf_a"),
    "Slack xox": ("xoxb-", "xoxa"),
    "Google AIza": ("AIza",),
    "GitLab glpat-": ("glpat-",),
    "URL password": ("a://", "a://b:", "a://b:c/", "a://b:c@", "a://b:1", "://", "@", "a://b:c"),
    "key=value": ("pw=", "password=", "password: ", "'api_key': '", "api key ", "api key: ", "token "),
    "quoted value of a plain key": ("KeyError: '", "key: '", "key: \"key: '", "key: 'key: \\'"),
    "auth scheme in key=value": ("Authorization: Token ", "auth=Bearer ", "password=Digest "),
    "Python literal prefix": ("pw=b'", "secret_key = r'", 'password: u"', "token=rb'", "pw=b"),
}
"""The prefixes of each form: the fixed start of a match, and starts that get far into one."""

SEPARATORS = ("", "-", "_", ".", "a", "1", " ", "=", ":", "/", "@", "'", '"', "\\")
"""What follows each prefix in a repeated unit: nothing, each class of character a pattern stops at."""

RUNS = ("a", "1", "-", " ", "a.")
"""One prefix followed by one long run of each."""


def texts_of(prefix: str, size: int) -> list[tuple[str, str]]:
    """The adversarial texts of ``prefix`` at ``size`` characters, each with a short description."""
    out = []
    for sep in SEPARATORS:
        unit = prefix + sep
        out.append((f"({unit!r})*", (unit * (size // len(unit) + 1))[:size]))
    for run in RUNS:
        out.append((f"{prefix!r}+({run!r})*", (prefix + run * size)[:size]))
    return out


def per_char_ns(text: str, samples: int) -> float:
    """Median CPU ns per character of ``samples`` timings, each of enough calls to take about 2 ms of
    CPU (CPU time: other processes on a loaded machine don't count)."""
    calls = max(1, 20_000 // len(text))
    times = []
    for _ in range(samples):
        t0 = time.process_time()
        for _ in range(calls):
            redact_text(text)
        times.append((time.process_time() - t0) / calls / len(text) * 1e9)
    return statistics.median(times)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, 1k and 10k only")
    parser.add_argument("--check", action="store_true", help="exit 1 when the goal is missed")
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    samples = 3 if args.quick else 5
    print(
        f"\nredact_text fuzz: {os.cpu_count()} x {platform.machine()} cores, load average {load()}; "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    ordinary = {size: (ORDINARY * (size // len(ORDINARY) + 1))[:size] for size in sizes}
    base = {size: per_char_ns(ordinary[size], samples * 2) for size in sizes}
    print("ordinary text, CPU ns per character: " + ", ".join(f"{s:,}: {base[s]:.1f}" for s in sizes))
    # Every text of a form is screened at 10k characters; its three costliest are timed at each size.
    screened = sum(len(texts_of(prefix, 1)) for prefixes in PREFIXES.values() for prefix in prefixes)
    print(f"{screened} texts screened at 10,000 chars; the 3 costliest of each form timed at each size\n")
    print(f"{'form':28s} {'worst':>7s}  {'at':>7s}  " + "  ".join(f"{s:>7,}" for s in sizes) + "  text")
    worst_all = 0.0
    for form, prefixes in PREFIXES.items():
        costs = []
        for prefix in prefixes:
            for i, (described, text) in enumerate(texts_of(prefix, 10_000)):
                costs.append((per_char_ns(text, 1), prefix, i, described))
        costs.sort(reverse=True)
        worst = (0.0, 0, "", ())
        for _, prefix, i, described in costs[:3]:
            ratios = tuple(per_char_ns(texts_of(prefix, size)[i][1], samples) / base[size] for size in sizes)
            for size, ratio in zip(sizes, ratios, strict=True):
                worst = max(worst, (ratio, size, described, ratios))
        worst_all = max(worst_all, worst[0])
        shown = "  ".join(f"{r:6.1f}x" for r in worst[3])
        print(f"{form:28s} {worst[0]:6.1f}x  {worst[1]:7,}  {shown}  {worst[2]}")
    ok = worst_all <= 10
    print(
        f"\nredact_text worst case / ordinary text, per character: {worst_all:.1f}x (goal <= 10x) "
        f"{'met' if ok else 'MISSED'}; load average {load()}"
    )
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
