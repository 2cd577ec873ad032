"""The broker's side of delivery (reliability plan R9, R10, R12, R15): what a broker crash costs
with the shipped durable settings and with save-on-change (and what each costs in throughput),
whether its store is really written, how big an offline backlog it holds for the ingester, and
how the ingester gets through a frozen broker.

The ingester runs as a subprocess with its persistent session on a broker of the test's own;
readings are published at QoS 1 and the PUBACKed set is the ledger.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.chaos import (
    SYS_CONF,
    Flood,
    SysMonitor,
    chaos_settings,
    saves_in_log,
    slots,
    stored_keys,
)
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    Run,
    ledger_check,
    make_site,
    stored_times,
    wait_for,
)

pytestmark = pytest.mark.chaos


def _offline_ingester(settings: Settings, log: Path) -> IngesterProcess:
    """Start the ingester once (the broker creates its persistent session), then stop it:
    from now on the broker queues its messages."""
    proc = IngesterProcess(settings, log).start()
    proc.wait_subscribed(1)
    assert proc.terminate() == 0
    return proc


def _wait_for_save_after(broker: MosquittoBroker, at_least: float = 2.5) -> None:
    """Wait until the broker wrote its store after this call, and `at_least` seconds passed:
    every message acknowledged before the call is then older than the save window."""
    before, start = saves_in_log(broker), time.monotonic()
    wait_for(lambda: saves_in_log(broker) > before and time.monotonic() - start >= at_least,
             10, what="an autosave after the last PUBACK")


KILLS = 10  # reliability plan R9: broker crash x10


def _drain_until_quiet(url: str, must_have: set, quiet: float = 2.0,
                       timeout: float = 90.0) -> set:
    """Wait until every key of `must_have` is stored and the stored set then stops growing for
    `quiet` seconds (whatever else survived has arrived); returns the stored keys."""
    try:
        wait_for(lambda: must_have <= stored_keys(url), timeout, every=0.2,
                 what="every message queued before a save delivered")
    except AssertionError:
        missing = must_have - stored_keys(url)
        raise AssertionError(f"{len(missing)} saved messages lost, e.g. "
                             f"{sorted(missing)[:3]}") from None
    last, since = stored_keys(url), time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        now = stored_keys(url)
        if now != last:
            last, since = now, time.monotonic()
    return last


def _is_suffix_loss(sent: list, stored: set) -> bool:
    survived = [key in stored for key in sent]
    lost = survived.count(False)
    return survived == [True] * (len(sent) - lost) + [False] * lost


def _window_losses(url: str, windows: list[list], stored: set) -> int:
    """How many messages of the kill windows (each in publish order) are missing, asserting
    that in each window they are the newest ones: the broker saves its whole store at once,
    so what a crash loses is exactly what it acknowledged after its last save, never an older
    message. A gap that closes within 20 s was only late (a slow drain), not lost."""
    def newest_lost() -> set | None:
        now = stored_keys(url)
        return now if all(_is_suffix_loss(w, now) for w in windows) else None

    if not all(_is_suffix_loss(w, stored) for w in windows):
        try:
            stored = wait_for(newest_lost, 20, every=0.5,
                              what="every window's losses to be its newest messages")
        except AssertionError:
            stored = stored_keys(url)
            bad = [[key in stored for key in w] for w in windows
                   if not _is_suffix_loss(w, stored)]
            raise AssertionError("a crash lost older messages while newer ones survived "
                                 f"(True = stored, in publish order): {bad}") from None
    return sum(len(set(w) - stored) for w in windows)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def test_broker_sigkill_loses_only_the_unsaved_window(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R9: with the shipped autosave (every ~2 s), a SIGKILLed broker keeps every message
    queued before its last save; only what arrived since may be lost, and always the newest.
    Ten kill cycles, each with 100 messages before a save and 50 after it."""
    make_site(conn)
    s = chaos_settings(settings, own_broker)
    proc = _offline_ingester(s, tmp_path / "ingest.log")
    times = slots(KILLS * 150)
    saved_keys: set = set()
    windows: list[list] = []
    restarts: list[float] = []
    try:
        for cycle in range(KILLS):
            chunk = [("A1", t) for t in times[cycle * 150:(cycle + 1) * 150]]
            old, fresh = chunk[:100], chunk[100:]
            flood = Flood(own_broker.port)
            flood.send(s.topic_prefix, old)
            _wait_for_save_after(own_broker)
            flood.send(s.topic_prefix, fresh)  # acknowledged, then killed before a save
            flood.close()
            own_broker.kill()
            start = time.monotonic()
            own_broker.restart()  # returns once the reloaded broker listens again
            restarts.append(time.monotonic() - start)
            saved_keys |= set(old)
            windows.append(fresh)
        proc.start()
        window_keys = {key for fresh in windows for key in fresh}
        stored = _drain_until_quiet(database_url, saved_keys)
        assert stored <= saved_keys | window_keys  # nothing invented
        window_lost = _window_losses(database_url, windows, stored)
        assert "broker resumed the session" in proc.log()
        assert proc.terminate() == 0
    finally:
        proc.kill()
    figures.record("delivery.ledger.broker_sigkill",
                   {"acked": len(saved_keys) + len(window_keys), "missing": window_lost,
                    "missing acked before the last save": 0, "extra": 0, "kills": KILLS},
                   section="delivery",
                   title=f"Broker SIGKILL x{KILLS}, shipped config, offline ingester session "
                         "(R9)",
                   target="missing <= acknowledged since the last save; extra 0",
                   source="tests/chaos/test_broker.py")
    figures.record("delivery.broker_sigkill.saved_lost", f"0/{len(saved_keys)}",
                   section="delivery",
                   title=f"Broker SIGKILL x{KILLS}, shipped config: messages lost that were "
                         "queued before the last autosave (R9)",
                   target="0", source="tests/chaos/test_broker.py")
    figures.record("delivery.broker_sigkill.window_lost",
                   f"{window_lost}/{len(window_keys)} (acknowledged after the last save, "
                   "just before the kill; always the newest)",
                   section="delivery",
                   title=f"Broker SIGKILL x{KILLS}, shipped config: loss within the autosave "
                         "window (R9)",
                   target="<= messages acknowledged since the last save (~2 s; documented "
                          "bound)",
                   source="tests/chaos/test_broker.py")
    figures.record("delivery.broker_sigkill.restart_s",
                   {"p50": round(_percentile(restarts, 0.5), 2),
                    "p95": round(_percentile(restarts, 0.95), 2),
                    "max backlog reloaded": len(saved_keys)},
                   section="delivery",
                   title=f"Broker restart after SIGKILL until it listens again, s (x{KILLS}, "
                         "R9)",
                   target="recorded", source="tests/chaos/test_broker.py")


def test_broker_sigkill_with_default_autosave_loses_the_queue(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    figures: Figures,
) -> None:
    """R9 negative control: mosquitto's default autosave_interval (1800 s) saves nothing in
    time: a SIGKILL loses the ingester's session and every message queued for it."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True,
                                     extra_conf="autosave_interval 1800\n")
    make_site(conn)
    s = chaos_settings(settings, broker)
    proc = _offline_ingester(s, tmp_path / "ingest.log")
    try:
        keys = [("A1", t) for t in slots(200)]
        flood = Flood(broker.port)
        flood.send(s.topic_prefix, keys)
        flood.close()
        time.sleep(2.5)  # the shipped config would have saved by now
        broker.kill()
        broker.restart()
        proc.start()
        # This start's connection (the log holds the first start's too): without the wait, a
        # SIGTERM on a loaded machine could come before the process installed its handler.
        proc.wait_subscribed(2)
        assert proc.log().count("new session") == 2  # the broker forgot the session itself
        time.sleep(1.5)
        lost = len(set(keys) - stored_keys(database_url))
        assert lost == len(keys), f"expected the default config to lose all, lost {lost}"
        assert proc.terminate() == 0
    finally:
        proc.kill()
        broker.cleanup()
    figures.record("delivery.broker_sigkill.default_autosave_lost", f"{lost}/{len(keys)}",
                   section="delivery",
                   title="Broker SIGKILL with mosquitto's default autosave_interval 1800 "
                         "(negative control, R9)",
                   target="all lost (why the shipped config saves every ~2 s)",
                   source="tests/chaos/test_broker.py")


# Plan finding 1's alternative: rewrite the store after every change instead of every ~2 s.
SAVE_ON_CHANGE = "autosave_on_changes true\nautosave_interval 1\n"


def test_broker_sigkill_with_save_on_change(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    figures: Figures,
) -> None:
    """R9 comparison: with autosave_on_changes true + autosave_interval 1, a SIGKILL x10 loses
    nothing acknowledged a second before the kill (the shipped 2 s autosave may). Measured
    here: mosquitto sends the PUBACK before it saves (the save comes in its next loop
    iteration), so a kill right after a PUBACK still loses the newest message or so."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True,
                                     extra_conf=SAVE_ON_CHANGE)
    make_site(conn)
    s = chaos_settings(settings, broker)
    proc = _offline_ingester(s, tmp_path / "ingest.log")
    times = slots(KILLS * 120)
    settled_keys: set = set()
    bursts: list[list] = []
    try:
        for cycle in range(KILLS):
            chunk = [("A1", t) for t in times[cycle * 120:(cycle + 1) * 120]]
            settled, burst = chunk[:100], chunk[100:]
            flood = Flood(broker.port)
            flood.send(s.topic_prefix, settled)
            time.sleep(1.0)  # acknowledged a second before the kill: must survive
            flood.send(s.topic_prefix, burst)
            broker.kill()  # at once after the last PUBACK
            flood.close()
            broker.restart()
            settled_keys |= set(settled)
            bursts.append(burst)
        proc.start()
        burst_keys = {key for burst in bursts for key in burst}
        stored = _drain_until_quiet(database_url, settled_keys)
        assert stored <= settled_keys | burst_keys
        burst_lost = _window_losses(database_url, bursts, stored)
        assert "broker resumed the session" in proc.log()
        assert proc.terminate() == 0
    finally:
        proc.kill()
        broker.cleanup()
    figures.record("delivery.broker_sigkill.save_on_change",
                   {"acknowledged >= 1 s before the kill, lost":
                        f"0/{len(settled_keys)}",
                    "acknowledged just before the kill, lost":
                        f"{burst_lost}/{len(burst_keys)}"},
                   section="delivery",
                   title=f"Broker SIGKILL x{KILLS} with autosave_on_changes true + "
                         "autosave_interval 1 (R9 comparison)",
                   target="0 acknowledged >= 1 s before; the newest may go (PUBACK precedes "
                          "the save)",
                   source="tests/chaos/test_broker.py")


def _offline_session(port: int, topic: str, client_id: str = "offline-ingester") -> None:
    """Create a persistent session subscribed to `topic` and leave: the broker queues for it."""
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                      protocol=mqtt.MQTTv5)
    sub.connect("127.0.0.1", port, clean_start=False, properties=props)
    sub.loop_start()
    try:
        wait_for(sub.is_connected, 10, what="subscriber")
        done = threading.Event()
        sub.on_subscribe = lambda *_: done.set()
        sub.subscribe(topic, qos=1)
        assert done.wait(10), "no SUBACK"
    finally:
        sub.disconnect()
        sub.loop_stop()


BACKLOGS = (0, 1000, 10_000)
RATE_SAMPLE = 300  # messages timed per configuration and backlog


def test_publish_throughput_shipped_vs_save_on_change(tmp_path: Path, figures: Figures) -> None:
    """R9: publish throughput (QoS 1, 500 in flight) with the shipped timed autosave and with
    save-on-change, each from the same saved store holding a backlog of 0, 1k and 10k
    messages for an offline session. The bound asserted is the reason for the shipped setting:
    with a backlog, save-on-change (which rewrites the whole store per message) is slower; the
    rates themselves are recorded, not asserted (a shared CI box)."""
    base = tmp_path / "mqtt"
    broker = MosquittoBroker().start(base, durable=True)
    port = broker.port
    _offline_session(port, "q/+/readings")
    keys = [("D1", t) for t in slots(BACKLOGS[-1])]
    snapshots: dict[int, Path] = {}
    store = base / "data" / "mosquitto.db"
    try:
        queued = 0
        for level in BACKLOGS:
            if level > queued:
                flood = Flood(port)
                flood.send("q", keys[queued:level])
                flood.close()
                queued = level
            broker.stop()  # SIGTERM saves the store: the snapshot holds exactly `level`
            snapshots[level] = tmp_path / f"store-{level}.db"
            shutil.copy(store, snapshots[level])
            broker = MosquittoBroker().start(base, durable=True, port=port)
        broker.stop()
        rates: dict[str, dict[int, float]] = {"shipped": {}, "save-on-change": {}}
        for level in BACKLOGS:
            for name, conf in (("shipped", ""), ("save-on-change", SAVE_ON_CHANGE)):
                shutil.copy(snapshots[level], store)
                broker = MosquittoBroker().start(base, durable=True, port=port,
                                                 extra_conf=conf)
                flood = Flood(port)
                rates[name][level] = flood.send("q", keys[:RATE_SAMPLE])
                flood.close()
                broker.stop()
        store_mb = snapshots[BACKLOGS[-1]].stat().st_size / 1e6
    finally:
        broker.cleanup()
    figures.record("delivery.publish_rate.autosave_comparison",
                   {f"backlog {level:,}": f"shipped {rates['shipped'][level]:,.0f} vs "
                    f"save-on-change {rates['save-on-change'][level]:,.0f} msg/s "
                    f"({rates['shipped'][level] / rates['save-on-change'][level]:.0f}x)"
                    for level in BACKLOGS},
                   section="delivery",
                   title="QoS 1 publish throughput, shipped autosave (every ~2 s) vs "
                         f"autosave_on_changes, {RATE_SAMPLE} msgs, same stores (R9)",
                   target="shipped faster with a backlog (plan: 850 vs 291 msg/s at 1k)",
                   source="tests/chaos/test_broker.py")
    figures.record("delivery.broker_store_mb_10k", round(store_mb, 2), section="delivery",
                   title="mosquitto.db size with 10k queued readings, MB (each save-on-change "
                         "save rewrites all of it)",
                   target="recorded", source="tests/chaos/test_broker.py")
    slower = {level: (rates["shipped"][level], rates["save-on-change"][level])
              for level in BACKLOGS
              if level and rates["shipped"][level] <= rates["save-on-change"][level]}
    assert not slower, f"shipped autosave not faster than save-on-change (msg/s): {slower}"
    assert store_mb > 0


def _persistence_check(broker: MosquittoBroker) -> tuple[bool, bool]:
    """Queue one message for an offline session, SIGUSR1, and report (store file rewritten,
    'Error saving' in the log)."""
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="sds-ingester",
                      protocol=mqtt.MQTTv5)
    sub.username_pw_set("ingester", "ingester-pw")
    sub.connect("127.0.0.1", broker.port, clean_start=False, properties=props)
    sub.loop_start()
    wait_for(sub.is_connected, 10, what="ingester session")
    sub.subscribe("sensors/+/readings", qos=1)
    time.sleep(0.3)
    sub.disconnect()
    sub.loop_stop()
    dev = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="A000001",
                      protocol=mqtt.MQTTv5)
    dev.username_pw_set("A000001", "device-pw")
    dev.connect("127.0.0.1", broker.port)
    dev.loop_start()
    wait_for(dev.is_connected, 10, what="device connect")
    info = dev.publish("sensors/A000001/readings", b'{"tair": 1}', qos=1)
    info.wait_for_publish(5)
    assert info.is_published()
    dev.disconnect()
    dev.loop_stop()
    db = broker.data_dir / "mosquitto.db"
    before = db.stat().st_mtime_ns if db.exists() else 0
    broker.signal(signal.SIGUSR1)  # save the store now
    try:
        wait_for(lambda: db.exists() and db.stat().st_mtime_ns != before, 5,
                 what="mosquitto.db rewritten")
        changed = True
    except AssertionError:
        changed = False
    time.sleep(0.2)
    return changed, "Error saving" in broker.log_text()


def test_shipped_persistence_is_writable_and_a_root_owned_dir_is_detected(
    tmp_path: Path, figures: Figures,
) -> None:
    """R10: the shipped config (rendered template + durable.conf) as the mosquitto user writes
    its store on SIGUSR1 without errors; a persistence dir it cannot write is caught."""
    users = {"ingester": "ingester-pw", "A000001": "device-pw"}
    broker = MosquittoBroker().start(tmp_path / "ok", users=users, shipped_template=True)
    try:
        changed, errors = _persistence_check(broker)
        assert changed and not errors, broker.log_text()[-2000:]
    finally:
        broker.cleanup()

    bad = MosquittoBroker().start(tmp_path / "bad", users=users, shipped_template=True)
    try:
        os.chown(bad.data_dir, 0, 0)  # root-owned, 0755: the mosquitto user cannot write it
        os.chmod(bad.data_dir, 0o755)
        for leftover in bad.data_dir.iterdir():
            os.chown(leftover, 0, 0)
        changed, errors = _persistence_check(bad)
        # The check must fail here: no rewrite, and the broker says why.
        assert errors and not changed, bad.log_text()[-2000:]
    finally:
        bad.cleanup()
    figures.record("delivery.persistence_writable", "store rewritten on SIGUSR1, 0 save errors;"
                   " unwritable-dir control detected", section="delivery",
                   title="Broker persistence writable with the shipped config (R10)",
                   target="writable, control fails", source="tests/chaos/test_broker.py")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


DEVICES = [f"C{i:02d}" for i in range(10)]
PER_DEVICE = 2000  # 10 x 2000 = 20k messages: ~3.3 h of a 500-device fleet at 12 per hour


def test_offline_backlog_is_kept_and_drained(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R12 (scaled): 20k messages queued for the offline ingester are all delivered when it
    returns; the broker drops none. Also R9's publish throughput at backlog 0, 1k and 10k
    with the shipped autosave setting."""
    for device in DEVICES:
        make_site(conn, device=device)
    s = chaos_settings(settings, own_broker, ingest_batch_size=500, ingest_flush_interval=0.25)
    proc = _offline_ingester(s, tmp_path / "ingest.log")
    sysmon = SysMonitor(own_broker.port)
    times = slots(PER_DEVICE)
    keys = [(d, t) for t in times for d in DEVICES]  # devices interleaved, as a fleet sends
    rates: dict[str, float] = {}
    peak_rss = 0
    try:
        flood = Flood(own_broker.port)
        for seg in range(len(keys) // 1000):
            rate = flood.send(s.topic_prefix, keys[seg * 1000:(seg + 1) * 1000])
            if seg in (0, 1, 10):
                rates[f"backlog {seg}k"] = round(rate)
        flood.close()
        assert len(flood.acked) == len(keys)
        wait_for(lambda: sysmon.value("store/messages/count") >= len(keys), 15,
                 what="the store holding the backlog")
        peak_rss = _rss_kb(own_broker.pid)
        start = time.monotonic()
        proc.start()
        wait_for(lambda: set(keys) <= stored_keys(database_url), 150, every=0.5,
                 what="the whole backlog stored")
        drain = time.monotonic() - start
        assert len(stored_keys(database_url)) == len(keys)
        sysmon.settle()  # the counters now cover the whole run
        dropped = sysmon.value("publish/messages/dropped")
        assert dropped == 0
        peak = sysmon.peak("store/messages/count")
        assert proc.terminate() == 0
    finally:
        proc.kill()
        sysmon.close()
    figures.record("delivery.backlog.delivered", f"{len(keys):,}/{len(keys):,} in {drain:.1f} s",
                   section="delivery",
                   title="Offline ingester backlog delivered after its return (R12, scaled: "
                         "10 devices x 2000)",
                   target="all", source="tests/chaos/test_broker.py")
    figures.record("delivery.backlog.dropped", int(dropped), section="delivery",
                   title="$SYS/broker/publish/messages/dropped during the backlog (R12)",
                   target="0", source="tests/chaos/test_broker.py")
    figures.record("delivery.backlog.store_max", int(peak), section="delivery",
                   title="Max $SYS/broker/store/messages/count (R12)", target="recorded",
                   source="tests/chaos/test_broker.py")
    figures.record("delivery.backlog.broker_rss_mb", round(peak_rss / 1024, 1),
                   section="delivery", title="Broker RSS at a 20k backlog, MB (R12)",
                   target="recorded", source="tests/chaos/test_broker.py")
    figures.record("delivery.backlog.outage_capacity",
                   "max_queued_messages 1,000,000 = 333 h at 500 devices x 12/h "
                   f"(20k queued and drained here at {len(keys) / drain:,.0f} msg/s)",
                   section="delivery", title="Maximum survivable ingester outage (R12)",
                   target=">= 24 h at the design fleet", source="tests/chaos/test_broker.py")
    figures.record("delivery.publish_rate_by_backlog", rates, section="delivery",
                   title="QoS 1 publish throughput (msg/s, 500 in flight) with the shipped "
                         "autosave, by backlog (R9)",
                   target="recorded", source="tests/chaos/test_broker.py")


def test_default_queue_limit_drops_silently(tmp_path: Path, figures: Figures) -> None:
    """Why the shipped max_queued_messages is large: with mosquitto's default of 1000, a
    backlog past it is acknowledged to the publisher and then dropped (counted in $SYS)."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=True,
                                     extra_conf=SYS_CONF + "max_queued_messages 1000\n")
    try:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 600
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="offline-ingester",
                          protocol=mqtt.MQTTv5)
        sub.connect("127.0.0.1", broker.port, clean_start=False, properties=props)
        sub.loop_start()
        wait_for(sub.is_connected, 10, what="subscriber")
        sub.subscribe("q/+/readings", qos=1)
        time.sleep(0.3)
        sub.disconnect()
        sub.loop_stop()
        sysmon = SysMonitor(broker.port)
        try:
            flood = Flood(broker.port)
            flood.send("q", [("D1", t) for t in slots(1500)])
            flood.close()
            assert len(flood.acked) == 1500  # every one acknowledged to the publisher...
            wait_for(lambda: sysmon.value("publish/messages/dropped") >= 500, 10,
                     what="$SYS dropped")
            dropped = sysmon.value("publish/messages/dropped")
        finally:
            sysmon.close()
        assert dropped == 500  # ...and a third of them silently thrown away
    finally:
        broker.cleanup()
    figures.record("delivery.default_queue_limit_dropped", f"{int(dropped)}/1500",
                   section="delivery",
                   title="Acknowledged then dropped with mosquitto's default "
                         "max_queued_messages 1000 (negative control, R6/R12)",
                   target="> 0 (why the shipped limit is 1,000,000)",
                   source="tests/chaos/test_broker.py")


# R15 states the drill as "90 s with keepalive 30": three keepalives. SDS_MQTT_KEEPALIVE is a
# setting, so the drill runs at 10 s (frozen 30 s): still three keepalives, the same detection
# bound (2 x keepalive), 60 s less waiting.
KEEPALIVE = 10
FREEZE = 3.0 * KEEPALIVE  # seconds the broker is stopped (R15: 3 x the keepalive)


class PatientLedger(Ledger):
    """A device that waits for its PUBACK through a broker freeze (paho keeps the unacked
    message and resends it after a reconnect) instead of republishing every 2 s."""

    def publish(self, topic: str, body: bytes, qos: int = 1, timeout: float = 5.0) -> bool:
        return super().publish(topic, body, qos, timeout=max(timeout, FREEZE + 60))


@pytest.mark.timeout(300)
def test_broker_frozen_for_three_keepalives(
    conn: psycopg.Connection, database_url: str, settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    """R15 (broker half): SIGSTOP the broker for three MQTT keepalives while a device keeps
    publishing. The ingester's paho notices the dead peer within two keepalives (during the
    freeze), reconnects after SIGCONT, and the ledger check passes: nothing lost, nothing
    invented. The plan's figures are 90 s with keepalive 30; SDS_MQTT_KEEPALIVE is a setting,
    so this runs 30 s with keepalive 10: the same three keepalives and the same bound."""
    make_site(conn)
    s = chaos_settings(settings, own_broker, mqtt_keepalive=KEEPALIVE)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    proc.wait_subscribed(1)
    ledger = PatientLedger("127.0.0.1", own_broker.port)
    try:
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 240, 20).start()
        wait_for(lambda: len(run.acked) >= 60, 30, what="publishing under way")
        own_broker.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            in_flight = next(t for t in run.times if t not in run.acked)
            wait_for(lambda: "disconnected from the broker" in proc.log(), FREEZE - 2,
                     every=0.5, what="the ingester detecting the frozen broker")
            detected = time.monotonic() - stopped
            time.sleep(max(0.0, stopped + FREEZE - time.monotonic()))  # the fault itself
        finally:
            own_broker.signal(signal.SIGCONT)
        resumed = time.monotonic()
        proc.wait_subscribed(2, timeout=60)
        reconnected = time.monotonic() - resumed
        wait_for(lambda: in_flight in set(stored_times(database_url)), 60, every=0.2,
                 what="the reading published into the freeze stored")
        recovered = time.monotonic() - resumed
        wait_for(run.done, 60, what="publishing")
        ledger_check(database_url, run)
        assert proc.alive(), proc.log()[-3000:]
        assert "had no session" not in proc.log()
        assert proc.terminate() == 0
    finally:
        ledger.close()
        proc.kill()
    rows = stored_times(database_url)
    assert detected <= 2 * KEEPALIVE + 10  # paho's keepalive: PINGREQ, then give up
    figures.record("delivery.ledger.broker_sigstop",
                   {"acked": len(run.acked), "missing": len(run.acked - set(rows)),
                    "extra": len(set(rows) - run.acked), "frozen s": int(FREEZE),
                    "keepalive s": KEEPALIVE},
                   section="delivery",
                   title="Broker frozen (SIGSTOP) for 3 keepalives while a device publishes "
                         "(R15)",
                   target="missing 0, extra 0", source="tests/chaos/test_broker.py")
    figures.record("delivery.broker_sigstop.timing",
                   {"dead peer detected after s": round(detected, 1),
                    "reconnected s after SIGCONT": round(reconnected, 1),
                    "in-flight reading stored s after SIGCONT": round(recovered, 1)},
                   section="delivery",
                   title="Frozen broker: ingester's detection and recovery times (R15)",
                   target=f"detection <= 2 x keepalive ({2 * KEEPALIVE} s); recovery recorded",
                   source="tests/chaos/test_broker.py")
