"""The built-in rules and the rule set, called directly on records, as a user tests a rule of their own."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from speedtronic.alerts import (
    DEFAULT_ALERTS,
    Alert,
    AlertConfigError,
    Memory,
    NonFinite,
    Rule,
    RuleSet,
    Spike,
    Threshold,
    ThroughputDrop,
    alerts_section,
    default_rules,
    rules_from_config,
)


def step(n: int, **values: Any) -> dict[str, Any]:
    return {"event": "train_step", "step": n, **values}


def run(rule: Any, records: Sequence[Mapping[str, Any]]) -> list[Alert]:
    return [alert for record in records for alert in rule.check(record)]


class TestAlert:
    def test_payload_has_the_fixed_keys_in_order_then_the_figures(self) -> None:
        """payload() is the alert record's payload: rule .. message, then the rule's figures."""
        alert = Alert("spike", "warning", "loss", 7, 9.5, 3.0, "loss 9.5 above", {"window": 128, "mean": 2.0})
        assert list(alert.payload()) == [
            "rule", "severity", "key", "step", "value", "threshold", "message", "window", "mean",
        ]  # fmt: skip

    def test_an_unknown_severity_is_refused(self) -> None:
        """Only warning and error exist (each is the record's level)."""
        with pytest.raises(ValueError, match="severity='fatal'"):
            Alert("x", "fatal", None, None, None, None, "m")  # type: ignore[arg-type]  # the mistake


class TestNonFinite:
    def test_alerts_once_at_the_onset_with_its_step_and_keys(self) -> None:
        """The first NaN alerts (error, step, keys); the NaNs after it don't; a new onset does."""
        rule = NonFinite()
        records = [step(1, loss=2.0), step(2, loss=math.nan), step(3, loss=math.nan), step(4, loss=1.0),
                   step(5, loss=math.inf)]  # fmt: skip
        alerts = run(rule, records)
        assert [(a.step, a.key, a.severity, a.rule) for a in alerts] == [
            (2, "loss", "error", "non_finite"), (5, "loss", "error", "non_finite"),
        ]  # fmt: skip
        assert alerts[0].figures == {"keys": ["loss"]}
        assert alerts[0].message == "non-finite loss (nan) in train_step at step 2"

    def test_watches_loss_keys_by_default_and_named_keys_when_given(self) -> None:
        """By default a loss-role key (train_loss), not grad_norm; keys= names them."""
        assert run(NonFinite(), [step(1, grad_norm=math.nan, train_loss=math.inf)])[0].figures == {
            "keys": ["train_loss"]
        }
        alerts = run(NonFinite(keys=["grad_norm"]), [step(1, grad_norm=math.nan, loss=math.nan)])
        assert [a.key for a in alerts] == ["grad_norm"]

    def test_a_record_without_the_value_neither_ends_nor_starts_an_onset(self) -> None:
        """A loss missing (or None) between two NaNs is no recovery: one incident, one alert."""
        records = [step(1, loss=math.nan), step(2), step(3, loss=None), step(4, loss=math.nan)]
        assert [a.step for a in run(NonFinite(), records)] == [1]

    def test_eval_and_train_losses_are_separate_onsets(self) -> None:
        """A NaN eval loss alerts even while the train loss is already NaN."""
        alerts = run(NonFinite(), [step(1, loss=math.nan), {"event": "eval", "step": 1, "loss": math.nan}])
        assert len(alerts) == 2


class TestSpike:
    def series(self, n: int, seed: int = 0) -> list[float]:
        rng = random.Random(seed)
        return [2.0 + rng.gauss(0, 0.01) for _ in range(n)]

    def test_a_jump_far_above_the_window_alerts(self) -> None:
        """A value above mean + 6 sigma alerts, with its window, mean, std and threshold."""
        rule = Spike()
        values = [*self.series(100), 3.0]
        alerts = run(rule, [step(i, loss=v) for i, v in enumerate(values)])
        assert [(a.step, a.key) for a in alerts] == [(100, "loss")]
        alert = alerts[0]
        assert alert.figures["window"] == 100
        assert alert.threshold == pytest.approx(alert.figures["mean"] + 6 * alert.figures["std"])
        assert alert.value == 3.0

    def test_noise_and_warmup_do_not_alert(self) -> None:
        """Gaussian noise over 1,000 steps, and a jump inside the warm-up, raise nothing."""
        assert run(Spike(), [step(i, loss=v) for i, v in enumerate(self.series(1000))]) == []
        assert run(Spike(), [step(i, loss=v) for i, v in enumerate([*self.series(10), 50.0])]) == []

    def test_a_long_run_keeps_its_window_figures_exact(self) -> None:
        """After 5,000 values far from zero (where running sums would drift), a spike's mean and std
        are those of its last 128 values."""
        rng = random.Random(1)
        values = [1000.0 + rng.gauss(0, 5.0) for _ in range(5000)]
        (alert,) = run(Spike(), [step(i, loss=v) for i, v in enumerate([*values, 1200.0])])
        window = values[-128:]
        mean = math.fsum(window) / 128
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in window) / 128)
        assert alert.figures["mean"] == pytest.approx(mean, rel=1e-12)
        assert alert.figures["std"] == pytest.approx(std, rel=1e-6)

    def test_a_rate_alerts_on_a_drop_not_a_rise(self) -> None:
        """For a rate key the spike is downward."""
        rule = Spike(keys=["samples_per_s"])
        base = [step(i, samples_per_s=1000 + (i % 3)) for i in range(64)]
        assert run(rule, [*base, step(64, samples_per_s=5000)]) == []
        rule = Spike(keys=["samples_per_s"])
        (alert,) = run(rule, [*base, step(64, samples_per_s=10)])
        assert alert.threshold is not None
        assert alert.value is not None
        assert alert.value < alert.threshold

    def test_only_train_steps_by_default(self) -> None:
        """An eval loss far above the train loss is another series: no alert."""
        records = [step(i, loss=v) for i, v in enumerate(self.series(64))] + [
            {"event": "eval", "step": 64, "loss": 9.0}
        ]
        assert run(Spike(), records) == []

    def test_a_steady_trend_does_not_alert(self) -> None:
        """A loss falling, or a grad norm climbing, in a straight line (or a smooth curve) is no spike."""
        climbing = [step(i, grad_norm=0.1 + 0.01 * i) for i in range(400)]
        curving = [step(i, grad_norm=1.0 + (i / 100) ** 2) for i in range(400)]
        falling = [step(i, loss=5.0 - 0.01 * i) for i in range(400)]
        assert run(Spike(), climbing + falling) == []
        assert run(Spike(), curving) == []

    def test_a_spike_on_a_trend_still_alerts(self) -> None:
        """A jump of many window deviations on top of a falling loss."""
        values = [5.0 - 0.01 * i for i in range(100)]
        values.append(values[-1] + 3.0)  # window std 0.29: 10 deviations above the mean
        assert [a.step for a in run(Spike(), [step(i, loss=v) for i, v in enumerate(values)])] == [100]


class TestThroughputDrop:
    def test_alerts_after_n_consecutive_steps_below_the_fraction(self) -> None:
        """Three logged steps below half the median: one alert, on the third."""
        rule = ThroughputDrop()
        records = [step(i, tokens_per_s=1000.0, lr=0.1) for i in range(20)]
        records += [step(20 + i, tokens_per_s=400.0) for i in range(5)]
        alerts = run(rule, records)
        assert [(a.step, a.key, a.figures["median"], a.threshold) for a in alerts] == [
            (22, "tokens_per_s", 1000.0, 500.0)
        ]

    def test_a_short_dip_does_not_alert(self) -> None:
        """Two slow steps, then back: no alert."""
        records = [step(i, tokens_per_s=1000.0) for i in range(20)]
        records += [step(20, tokens_per_s=100.0), step(21, tokens_per_s=100.0), step(22, tokens_per_s=990.0)]
        assert run(ThroughputDrop(), records) == []


class TestMemory:
    def test_allocator_retries_and_ooms_rising_alert(self) -> None:
        """A higher alloc_retries is a warning, a higher ooms an error."""
        alerts = run(Memory(), [step(1, alloc_retries=0, ooms=0), step(2, alloc_retries=2, ooms=0),
                                step(3, alloc_retries=2, ooms=1)])  # fmt: skip
        assert [(a.step, a.key, a.severity, a.value, a.threshold) for a in alerts] == [
            (2, "alloc_retries", "warning", 2.0, 0.0), (3, "ooms", "error", 1.0, 0.0),
        ]  # fmt: skip

    def test_a_steady_climb_of_memory_bytes_alerts(self) -> None:
        """memory_bytes never falling for `climb` steps and up by `rise` alerts; a sawtooth doesn't."""
        climbing = [step(i, memory_bytes=1000 + 10 * i) for i in range(60)]
        assert [a.step for a in run(Memory(climb=50), climbing)] == [49]
        sawtooth = [step(i, memory_bytes=1000 + 100 * (i % 5)) for i in range(200)]
        assert run(Memory(climb=50), sawtooth) == []


class TestThreshold:
    def test_alerts_when_it_crosses_and_again_after_it_came_back(self) -> None:
        """above= crossing alerts once per excursion, with its severity."""
        rule = Threshold("grad_norm", above=10, severity="error")
        values = [1, 11, 12, 3, 15]
        alerts = run(rule, [step(i, grad_norm=v) for i, v in enumerate(values)])
        assert [(a.step, a.value, a.threshold, a.severity) for a in alerts] == [
            (1, 11.0, 10.0, "error"), (4, 15.0, 10.0, "error"),
        ]  # fmt: skip

    def test_needs_a_bound(self) -> None:
        """Neither above nor below is an error naming the key."""
        with pytest.raises(ValueError, match="Threshold\\('loss'\\)"):
            Threshold("loss")


class TestRuleSet:
    def test_cooldown_keeps_one_alert_per_incident(self) -> None:
        """A rule alerting at every step is heard once per cooldown (steps) per key."""

        class Always:
            name = "always"
            cooldown = 10

            def check(self, record: Mapping[str, Any]) -> list[Alert]:
                return [Alert("always", "warning", "loss", record["step"], 1.0, None, "!")]

        rules = RuleSet([Always()])
        steps = [a.step for i in range(30) for a in rules.check(step(i, loss=1.0))]
        assert steps == [0, 10, 20]

    def test_a_failing_rule_is_counted_and_the_others_still_run(self) -> None:
        """A rule that raises is warned about once and counted; the next rule still alerts."""

        class Broken:
            name = "broken"

            def check(self, record: Mapping[str, Any]) -> list[Alert]:
                raise KeyError("oops")

        rules = RuleSet([Broken(), Threshold("loss", above=1)])
        with pytest.warns(UserWarning, match="alert rule 'broken' failed"):
            alerts = rules.check(step(1, loss=5.0))
        rules.check(step(2, loss=0.5))
        assert [a.rule for a in alerts] == ["threshold"]
        assert rules.errors == {"broken": 2}

    def test_something_that_is_no_rule_is_refused_up_front(self) -> None:
        """A plain function is not a rule: TypeError naming its place."""
        with pytest.raises(TypeError, match="alerts\\[0\\]"):
            RuleSet([lambda record: []])  # type: ignore[list-item]  # the mistake under test

    def test_a_rule_reads_only_the_events_it_names(self) -> None:
        """A rule with ``events`` is called on those events' records only; one without, on every record."""
        journal: list[str] = []

        class Journal:
            def __init__(self, name: str, events: tuple[str, ...] | None) -> None:
                self.name, self.events = name, events

            def check(self, record: Mapping[str, Any]) -> list[Alert]:
                journal.append(f"{self.name} {record.get('event')}")
                return []

        rules = RuleSet(
            [Journal("evals", ("eval",)), Journal("all", None), Journal("steps", ("train_step",))]
        )
        for record in [step(1, loss=1.0), {"event": "eval", "step": 1}, {"event": "epoch"}, {"step": 2}]:
            rules.check(record)
        assert journal == [
            "all train_step",
            "steps train_step",
            "evals eval",
            "all eval",
            "all epoch",
            "all None",
        ]

    def test_events_that_are_not_event_names_are_refused_up_front(self) -> None:
        """A rule whose ``events`` holds no event names: ValueError naming the rule."""

        class Odd:
            name = "odd"
            events = (1, 2)

            def check(self, record: Mapping[str, Any]) -> list[Alert]:
                return []

        with pytest.raises(ValueError, match="rule 'odd': events must be event names"):
            RuleSet([Odd()])

    def test_built_in_rules_say_which_events_they_read(self) -> None:
        """The built-in rules' ``events``: what their ``events=`` argument chose."""
        assert Spike().events == frozenset({"train_step"})
        assert NonFinite().events == frozenset({"train_step", "eval"})
        assert Threshold("loss", above=1).events is None

    def test_a_user_rule_is_a_rule(self) -> None:
        """A class with name and check is a Rule (runtime-checkable Protocol)."""
        assert isinstance(Spike(), Rule)


class TestFromConfig:
    def test_defaults_are_non_finite_and_spike(self) -> None:
        """DEFAULT_ALERTS builds NonFinite and Spike with their defaults."""
        assert [type(r).__name__ for r in default_rules()] == ["NonFinite", "Spike"]
        assert [entry["rule"] for entry in DEFAULT_ALERTS] == ["non_finite", "spike"]

    def test_entries_build_rules_with_their_options(self) -> None:
        """Each entry's keys are the rule's keyword arguments."""
        entries = [{"rule": "spike", "keys": ["loss"], "k": 4}, {"rule": "threshold", "key": "x", "below": 0}]
        rules = rules_from_config(entries)
        spike, threshold = rules
        assert isinstance(spike, Spike)
        assert spike.k == 4
        assert spike.keys == ("loss",)
        assert isinstance(threshold, Threshold)
        assert threshold.below == 0

    def test_an_unknown_rule_lists_the_rules(self) -> None:
        """One line naming the entry, the unknown rule and every built-in one."""
        with pytest.raises(AlertConfigError) as caught:
            rules_from_config([{"rule": "non_finite"}, {"rule": "spiek"}], "cfg.yaml")
        assert str(caught.value) == (
            "cfg.yaml: alerts[1]: unknown rule 'spiek'; rules: memory, non_finite, spike, threshold, "
            "throughput_drop (or 'package.module:factory')"
        )

    def test_an_unknown_key_lists_the_rules_keys(self) -> None:
        """An option the rule doesn't take is named, with the ones it does."""
        with pytest.raises(AlertConfigError) as caught:
            rules_from_config([{"rule": "spike", "sigma": 3}])
        assert str(caught.value) == (
            "alerts: alerts[0]: spike: unknown key 'sigma'; its keys: cooldown, events, k, keys, min_std, "
            "name, warmup, window"
        )

    def test_a_bad_value_names_the_entry(self) -> None:
        """A value the rule refuses: the entry, the rule and its own message."""
        with pytest.raises(AlertConfigError, match="alerts\\[0\\]: spike: Spike\\(k=-1\\)"):
            rules_from_config([{"rule": "spike", "k": -1}])

    @pytest.mark.parametrize(
        ("entry", "problem"),
        [
            ({"rule": "spike", "cooldown": -1}, "spike: cooldown must be an int >= 0 (steps), got -1"),
            (
                {"rule": "non_finite", "cooldown": 1.5},
                "non_finite: cooldown must be an int >= 0 (steps), got 1.5",
            ),
            (
                {"rule": "spike", "name": 5},
                "spike: name must be a non-empty str (the 'rule' of its alerts), got 5",
            ),
            (
                {"rule": "spike", "events": 5},
                "spike: Spike(events=5): expected event names, or None for every event",
            ),
            ({"rule": "spike", "keys": 5}, "spike: Spike(keys=5): expected key names"),
            (
                {"rule": "builtins:print"},
                "builtins:print: None is not a rule: expected an object with a 'name'",
            ),
        ],
        ids=[
            "negative_cooldown",
            "float_cooldown",
            "int_name",
            "int_events",
            "int_keys",
            "factory_of_no_rule",
        ],
    )
    def test_a_rule_a_rule_set_would_refuse_is_refused_here(
        self, entry: dict[str, Any], problem: str
    ) -> None:
        """What the entry built must run in a RuleSet: else an AlertConfigError naming the entry, not a
        TypeError or ValueError from the RuleSet at the first record."""
        with pytest.raises(AlertConfigError) as caught:
            rules_from_config([{"rule": "non_finite"}, entry], "f.yaml")
        assert str(caught.value).startswith(f"f.yaml: alerts[1]: {problem}"), str(caught.value)

    def test_a_rule_set_names_the_bad_rules_place(self) -> None:
        """The same checks in a RuleSet: the rule's place for no rule, its name for a bad cooldown."""
        with pytest.raises(TypeError, match=r"^alerts\[1\]: name must be a non-empty str"):
            RuleSet([NonFinite(), Spike(name="")])
        with pytest.raises(
            ValueError, match=r"^rule 'spike': cooldown must be an int >= 0 \(steps\), got -2$"
        ):
            RuleSet([Spike(cooldown=-2)])

    def test_a_user_rule_by_import_path(self) -> None:
        """'package.module:factory' builds a rule of the user's."""
        (rule,) = rules_from_config([{"rule": "speedtronic.alerts:Threshold", "key": "x", "above": 1}])
        assert isinstance(rule, Threshold)

    def test_a_file_section_with_on_alert(self) -> None:
        """alerts_section reads alerts and on_alert; anything else is refused with what exists."""
        rules, on_alert = alerts_section({"alerts": [{"rule": "non_finite"}], "on_alert": "stop"}, "f.yaml")
        assert on_alert == "stop"
        assert len(rules) == 1
        with pytest.raises(
            AlertConfigError, match=r"f\.yaml: rules: unknown key; known keys: alerts, on_alert"
        ):
            alerts_section({"alerts": [], "rules": []}, "f.yaml")
        with pytest.raises(AlertConfigError, match="on_alert: expected one of log, stop"):
            alerts_section({"alerts": [], "on_alert": "halt"}, "f.yaml")
