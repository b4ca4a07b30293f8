"""The demo's pure parts: samples from observed objects, throughput, progress
lines, the ConsumerGroup it applies and the report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticfleet_dev.demo.group import DLQ_TOPIC, NAMESPACE, TOPIC, demo_group
from staticfleet_dev.demo.progress import progress_line
from staticfleet_dev.demo.report import build_report, format_report
from staticfleet_dev.demo.samples import (
    MemberSample,
    RolloutView,
    Sample,
    cumulative_processed,
    member_samples,
    parse_time,
    processed_total,
    processing,
    rollout_view,
    throughput,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0


def m(ordinal: int, uid: str, records: int | None = None, *, ready: bool = True,
      deleting: bool = False, start: float | None = 1.0) -> MemberSample:
    return MemberSample(ordinal=ordinal, uid=uid, ready=ready, deleting=deleting,
                        records=records, process_start=start)


def s(t: float, *members: MemberSample, rollout: RolloutView | None = None) -> Sample:
    return Sample(t=T0 + t, members=members, rollout=rollout or RolloutView())


def rfc(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + t, UTC).isoformat().replace("+00:00", "Z")


def pod(ordinal: int, uid: str, *, ready: bool = True, deleting: bool = False,
        ip: str = "127.0.1.2") -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "labels": {"staticfleet.io/ordinal": str(ordinal)}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"kind": "Pod", "metadata": meta, "status": {
        "podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


# -- parsing -------------------------------------------------------------------------------


def test_parse_time_reads_rfc3339_with_z() -> None:
    assert parse_time(rfc(12.5)) == pytest.approx(T0 + 12.5)
    assert parse_time(None) is None
    assert parse_time("") is None


def test_rollout_view_of_a_rolling_group() -> None:
    cg = {"status": {"timeouts": {"sessionTimeoutMs": 45000}, "rollout": {
        "phase": "Rolling", "membersRestarted": [0], "current": 1,
        "currentStoppedAt": rfc(3), "inFlight": [{"ordinal": 1, "stoppedAt": rfc(3)}]}}}
    view = rollout_view(cg)
    assert view.phase == "Rolling"
    assert view.restarted == 1
    assert view.current == 1
    assert view.current_stopped_at == pytest.approx(T0 + 3)
    assert view.session_ms == 45000


@pytest.mark.parametrize("cg", [None, {}, {"status": None}, {"status": {"rollout": None}}])
def test_rollout_view_of_a_group_without_status(cg: Any) -> None:
    assert rollout_view(cg) == RolloutView()


def test_member_samples_pair_pods_with_their_status_by_uid() -> None:
    pods = [pod(1, "b", ready=False), pod(0, "a"), {"metadata": {"uid": "x"}},
            pod(0, "c", deleting=True)]
    statuses = {"a": {"recordsProcessed": 10, "processStart": 5.0}, "b": None}
    got = member_samples(pods, statuses)
    assert got == (
        MemberSample(0, "a", ready=True, deleting=False, records=10, process_start=5.0),
        MemberSample(0, "c", ready=True, deleting=True),
        MemberSample(1, "b", ready=False, deleting=False),
    )


# -- series and spans ------------------------------------------------------------------------


def test_cumulative_processed_adds_a_restarted_process_instead_of_resetting() -> None:
    samples = [
        s(0, m(0, "a", 100)),
        s(1, m(0, "a", 150)),
        s(2, m(0, "a", ready=False, deleting=True)),     # stopping: no /status
        s(3),                                          # gone
        s(4, m(0, "b", 0, ready=False, start=9.0)),
        s(5, m(0, "b", 40, start=9.0)),
    ]
    assert cumulative_processed(samples) == {0: [
        (T0, 100), (T0 + 1, 150), (T0 + 2, 150), (T0 + 3, 150), (T0 + 4, 150), (T0 + 5, 190)]}
    assert processed_total(samples) == 190


def test_cumulative_processed_counts_a_container_restart_in_the_same_pod() -> None:
    samples = [s(0, m(0, "a", 50, start=1.0)), s(1, m(0, "a", 5, start=2.0))]
    assert cumulative_processed(samples)[0][-1] == (T0 + 1, 55)


def test_cumulative_processed_keeps_the_highest_value_of_a_counter() -> None:
    samples = [s(0, m(0, "a", 50)), s(1, m(0, "a", 40))]
    assert cumulative_processed(samples)[0][-1][1] == 50


def test_processed_total_sums_members() -> None:
    assert processed_total([s(0, m(0, "a", 3), m(1, "b", 4))]) == 7
    assert processed_total([]) == 0


def test_throughput_is_a_rate_over_the_window() -> None:
    cumulative = {0: [(T0 + t, 10 * t) for t in range(11)]}
    rates = throughput(cumulative, window=5.0)[0]
    assert [t - T0 for t, _ in rates] == list(range(1, 11))
    assert all(r == pytest.approx(10.0) for _, r in rates)


def test_throughput_averages_bursts_and_drops_to_zero_while_away() -> None:
    # 50 records every 5 s, then nothing for 10 s
    pts = [(T0 + t, 50 * ((t + 4) // 5)) for t in range(0, 11)] + \
          [(T0 + t, 100) for t in range(11, 21)]
    rates = dict(throughput({0: pts}, window=5.0)[0])
    assert rates[T0 + 10] == pytest.approx(10.0)
    assert rates[T0 + 20] == 0.0


def test_throughput_of_a_single_point_is_empty() -> None:
    assert throughput({0: [(T0, 5)]}) == {0: []}


# -- progress --------------------------------------------------------------------------------


def test_progress_line_while_a_member_is_away() -> None:
    view = RolloutView(phase="Rolling", restarted=1, current=2, current_stopped_at=T0 + 9.0,
                       session_ms=45000)
    sample = s(12.1, m(0, "a"), m(1, "b"), m(2, "c", deleting=True), rollout=view)
    assert progress_line(92.34, "rolling", sample, 3, 12345) == (
        "[  92.3s] rolling    restarted 1/3  member 2 away 3.1s / session 45.0s  ready 2/3  "
        "processing 0/3  processed 12,345")


def test_progress_line_when_steady() -> None:
    sample = s(0, m(0, "a", 10), m(1, "b", ready=False))
    assert progress_line(5.0, "steady", sample, 2, 10) == (
        "[   5.0s] steady     restarted 0/2  ready 1/2  processing 1/2  processed 10")


def test_processing_counts_members_whose_current_process_has_processed_records() -> None:
    sample = s(0, m(0, "a", 5), m(0, "z", 9, deleting=True), m(1, "b", 0), m(2, "c"),
               m(3, "d", 1))
    assert processing(sample) == 2


# -- the group and the report ------------------------------------------------------------------


def test_demo_group_points_the_example_at_the_local_environment(tmp_path: Path) -> None:
    example = yaml.safe_load((REPO / "examples" / "consumergroup.yaml").read_text())
    obj = demo_group(example, bootstrap="127.0.0.1:39092", members=2, output=tmp_path / "out")
    spec = obj["spec"]
    assert obj["metadata"]["namespace"] == NAMESPACE
    assert spec["replicas"] == 2
    assert spec["kafka"]["bootstrapServers"] == "127.0.0.1:39092"
    assert spec["kafka"]["topics"] == [TOPIC]
    assert spec["processing"]["spark"]["master"] == "local[1]"
    assert spec["processing"]["sink"] == {"type": "parquet", "path": str(tmp_path / "out")}
    assert spec["processing"]["deadLetterTopic"] == DLQ_TOPIC
    assert spec["processing"]["transform"] == "consumer_runtime.transforms:count_by_key"
    assert example["spec"]["replicas"] == 3, "the example itself is left as it was"


def _report(**over: Any) -> dict[str, Any]:
    final = {"status": {"timeouts": {"sessionTimeoutMs": 45000}, "rollout": {
        "membersRestarted": [0, 1, 2], "rebalancesDuringRollout": 0, "longestAbsenceMs": 6100}}}
    kwargs: dict[str, Any] = {
        "env_name": "demo", "root": Path("/tmp/x"), "members": 3, "final": final,
        "produced": 4000, "committed": 4000, "end_offsets": 4000, "broker_generations": 0,
        "output": {"path": "/tmp/x/out", "files": 30, "rows": 900, "countSum": 4000},
        "seconds": {"envUp": 20.04, "total": 150.0}, "plot": Path("/tmp/x/p.png"),
        "kubeconfig": Path("/tmp/x/kubeconfig"), "torn_down": False}
    kwargs.update(over)
    return build_report(**kwargs)


def test_build_report() -> None:
    report = _report()
    assert report["membersRestarted"] == 3
    assert report["rebalancesDuringRollout"] == 0
    assert report["longestAbsenceMs"] == 6100
    assert report["sessionTimeoutMs"] == 45000
    assert "absencesSeenS" not in report, "one absence: the operator's, per member in handoffs"
    assert (report["produced"], report["processed"]) == (4000, 4000)
    assert report["kubeconfig"] == "/tmp/x/kubeconfig"
    assert report["seconds"] == {"envUp": 20.0, "total": 150.0}


def test_a_torn_down_report_has_no_kubeconfig() -> None:
    assert _report(torn_down=True)["kubeconfig"] is None


def test_format_report_is_a_table_that_flags_a_mismatch() -> None:
    text = format_report(_report())
    assert "members restarted          3/3" in text
    assert "6.1s of a 45.0s session timeout" in text
    assert "MISMATCH" not in text
    assert "MISMATCH" in format_report(_report(committed=3999))
    assert "removed with the environment" in format_report(_report(torn_down=True))


def test_throughput_png_is_written(tmp_path: Path) -> None:
    from staticfleet_dev.plot import write_throughput_png

    series = {o: [(T0 + t, 60.0 + o) for t in range(30)] for o in range(3)}
    spans = {0: [("absence", T0 + 5, T0 + 5.014), ("gap", T0 + 4.9, T0 + 5.3)],
             1: [("absence", T0 + 12, T0 + 17)], 2: []}
    path = write_throughput_png(tmp_path / "p.png", series, spans, t0=T0 + 3,
                                rollout=(T0 + 3, T0 + 25), session_s=45.0, expected=66.7,
                                title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_legend_format_is_filled_with_the_series_labels() -> None:
    from staticfleet_dev.demo.plots import _legend

    assert _legend("{{member}}", {"member": "orders-1", "group": "orders"}) == "orders-1"
    assert _legend("{{ group }} {{topic}}-{{partition}}",
                   {"group": "orders", "topic": "t", "partition": "3"}) == "orders t-3"


def test_handoff_notes_say_absence_and_processing_gap() -> None:
    from staticfleet_dev.demo.plots import handoff_notes

    cg = {"status": {"rollout": {"handoffs": [
        {"ordinal": 2, "mode": "warm", "absenceMs": 640, "processingGapMs": 2900},
        {"ordinal": 1, "mode": "warm", "absenceMs": 1100}]}}}
    notes = handoff_notes(cg)
    assert notes[2] == ("warm restart: out of the group 640 ms (close -> assignment), "
                        "processing gap 2900 ms (last batch -> first batch)")
    assert notes[1].endswith("processing gap n/a") and handoff_notes(None) == {}


def test_the_pngs_shades_are_the_operators_figures() -> None:
    """The PNG shades what status.rollout.handoffs says, from where each figure began; a
    figure without its start (a handoff recorded before the starts were) is not drawn."""
    from staticfleet_dev.demo.plots import handoff_shades

    cg = {"status": {"rollout": {"handoffs": [
        {"ordinal": 2, "mode": "warm", "absenceMs": 14, "processingGapMs": 360,
         "absentFrom": "2026-11-24T12:00:00.100Z",
         "processingGapFrom": "2026-11-24T12:00:00.050Z"},
        {"ordinal": 1, "mode": "warm", "absenceMs": 1100}]}}}
    at = datetime(2026, 11, 24, 12, 0, tzinfo=UTC).timestamp()
    shades = handoff_shades(cg)
    assert [(w, round(a - at, 3), round(b - at, 3)) for w, a, b in shades[2]] == [
        ("absence", 0.1, 0.114), ("gap", 0.05, 0.41)]
    assert shades[1] == [] and handoff_shades(None) == {}


def test_dashboard_panels_png(tmp_path: Path) -> None:
    from staticfleet_dev.plot import write_panels_png

    out = write_panels_png(tmp_path / "d.png", [
        ("Throughput per member (records/s)", "records/s",
         [("orders-0", [(100.0, 5.0), (102.0, 7.0)])]),
        ("Rebalances observed by the operator (5m)", "rebalances", [])],
        t0=100.0, rollout=(100.0, 102.0), title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_progress_line_says_a_member_is_back_once_it_rejoined() -> None:
    cg = {"status": {"timeouts": {"sessionTimeoutMs": 45000}, "rollout": {
        "phase": "Rolling", "current": 1, "membersRestarted": [2],
        "currentStoppedAt": "2026-01-01T12:00:00Z",
        "inFlight": [{"ordinal": 1, "phase": "Serving", "stoppedAt": "2026-01-01T12:00:00Z",
                      "closedAt": "2026-01-01T12:00:01.000Z",
                      "rejoinedAt": "2026-01-01T12:00:01.600Z"}]}}}
    view = rollout_view(cg)
    line = progress_line(10.0, "rolling", Sample(t=view.current_stopped_at + 6, members=(
        MemberSample(1, "u", True, False),), rollout=view), 3, 100)
    assert "member 1 back after 0.6s" in line and "away" not in line
