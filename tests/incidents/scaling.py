"""Time scaling: the shipped rules and Alertmanager timings, FACTOR times
faster, so that an incident that pages after 15 minutes in production pages
after 45 seconds here.

Every duration in the rule files is divided by FACTOR: `for:` and
`keep_firing_for:`, range
selectors (`[5m]`), `offset`, and the horizon of `predict_linear` (a number
of seconds). So is the evaluation and scrape interval (the deployment's
15 s, deploy/prometheus/prometheus.yml) and Alertmanager's group_wait,
group_interval, repeat_interval and resolve_timeout. Rates are per second and
ratios are ratios, so thresholds stay as shipped; a measured time multiplied
by FACTOR is the production time.

What does not scale: the kernel's own averages (load average, PSI avg10)
and the time the kernel takes to fill a table or a disk. Those make an
incident page later here, in scaled time, than it would in production,
never earlier; docs/time-to-page.md says where it matters.
"""

import re

FACTOR = 20
PRODUCTION_INTERVAL_S = 15  # deploy/prometheus/prometheus.yml

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# One Prometheus duration such as 5m, 1h30m or 250ms.
_DURATION = r"(?:\d+(?:ms|[smhd]))+"
_PARTS = re.compile(r"(\d+)(ms|[smhd])")
_RANGE = re.compile(r"\[(" + _DURATION + r")\]")
_OFFSET = re.compile(r"\boffset (" + _DURATION + r")\b")
_FOR = re.compile(r"^(\s*(?:keep_firing_)?for:\s*)(" + _DURATION + r")(\s*)$", re.M)
# predict_linear(v[6h], 4*60*60): the second argument is seconds ahead.
_HORIZON = re.compile(r"(predict_linear\([^\n]*\],\s*)([\d*]+)\)")
_AM_TIMING = re.compile(r"^(\s*(?:group_wait|group_interval|repeat_interval|resolve_timeout):\s*)(" + _DURATION + r")(\s*)$", re.M)


def duration_ms(text):
    return sum(int(n) * _UNIT_MS[u] for n, u in _PARTS.findall(text))


def scaled(text):
    """A duration divided by FACTOR, in milliseconds so nothing rounds."""
    return f"{duration_ms(text) // FACTOR}ms"


def interval():
    return f"{PRODUCTION_INTERVAL_S * 1000 // FACTOR}ms"


def scale_rules(text):
    text = _FOR.sub(lambda m: m.group(1) + scaled(m.group(2)) + m.group(3), text)
    text = _RANGE.sub(lambda m: "[" + scaled(m.group(1)) + "]", text)
    text = _OFFSET.sub(lambda m: "offset " + scaled(m.group(1)), text)
    return _HORIZON.sub(lambda m: f"{m.group(1)}{m.group(2)}/{FACTOR})", text)


def scale_alertmanager(text, webhook_port):
    """alertmanager.yml with its timings scaled and its placeholder webhook
    URLs (127.0.0.1:5001) pointed at the test's receiver."""
    text = _AM_TIMING.sub(lambda m: m.group(1) + scaled(m.group(2)) + m.group(3), text)
    return text.replace("http://127.0.0.1:5001/", f"http://127.0.0.1:{webhook_port}/")


def only_durations_differ(original, copy):
    """True when the two texts are equal once every duration, and every
    predict_linear horizon, is replaced by a placeholder: the copy changed
    timings and nothing else."""

    def mask(text):
        text = re.sub(r"\b" + _DURATION + r"\b", "D", text)
        return re.sub(r"(predict_linear\([^\n]*\],\s*)[\d*/]+\)", r"\1H)", text)

    return mask(original) == mask(copy)
