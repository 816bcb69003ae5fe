"""Rotation followed through inotify's events (``speedtronic.sinks.PathEvents``): the stat rule's
every case, with a stat only after something happened to the file or a directory above it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import speedtronic.sinks
from speedtronic.sinks import LineFile

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def assert_stat_ed_and_followed(path: Path) -> None:
    """A file at ``path`` watched by no events follows a rename all the same (by its stat)."""
    sink = written(path)
    sink.write("before")
    assert sink._events is None
    path.rename(path.with_name(path.name + ".1"))
    sink.write("after")
    sink.close()
    assert lines(path) == ["after"]
    assert lines(path.with_name(path.name + ".1")) == ["before"]


def written(path: Path, on_error: Any = None) -> LineFile:
    errors: list[Any] = []
    return LineFile(path, on_error or (lambda *args: errors.append(args)))


@linux_only
class TestWatched:
    def test_a_write_stats_nothing_until_something_happens(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """On a local file system 200 writes stat the path once (the first); a rename makes the next
        write stat it again, and that line goes to the new file."""
        path = tmp_path / "m.jsonl"
        sink = written(path)
        stats: list[str] = []
        real_stat = os.stat

        def counted(name: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if str(name) == str(path):
                stats.append(str(name))
            return real_stat(name, *args, **kwargs)

        monkeypatch.setattr(os, "stat", counted)
        for n in range(200):
            sink.write(f"line {n}")
        assert len(stats) == 1
        path.rename(tmp_path / "m.jsonl.1")
        sink.write("after")
        sink.close()
        assert len(stats) == 2
        assert lines(path) == ["after"]
        assert lines(tmp_path / "m.jsonl.1")[-1] == "line 199"

    def test_quiet_until_something_happens_to_the_path(self, tmp_path: Path) -> None:
        """``quiet()`` is false before the first stat and after a rename, true otherwise; it reads
        nothing, so ``changed()`` still sees the rename."""
        path = tmp_path / "m.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            events = speedtronic.sinks.PathEvents.open(fd, str(path))
            assert events is not None
            assert not events.quiet()  # the first write stats the path
            assert events.changed()
            assert events.quiet()
            path.rename(tmp_path / "m.log.1")
            assert not events.quiet()
            assert not events.quiet()  # asking again reads nothing
            assert events.changed()
            assert events.fired
            assert events.quiet()
            events.close()
        finally:
            os.close(fd)

    def test_a_renamed_directory_is_followed(self, tmp_path: Path) -> None:
        """The file's directory renamed: the next line goes to a new file at the path (its
        directories made again), the lines before stay in the moved directory."""
        path = tmp_path / "run" / "logs" / "t.log"
        sink = written(path)
        sink.write("before")
        (tmp_path / "run").rename(tmp_path / "run.1")
        sink.write("after")
        sink.close()
        assert lines(tmp_path / "run.1" / "logs" / "t.log") == ["before"]
        assert lines(path) == ["after"]

    def test_a_file_renamed_onto_the_path_is_followed(self, tmp_path: Path) -> None:
        """Another file renamed onto the path (ours unlinked by it): the next line goes to that file."""
        path = tmp_path / "t.log"
        sink = written(path)
        sink.write("before")
        (tmp_path / "other").write_text("other\n")
        (tmp_path / "other").rename(path)
        sink.write("after")
        sink.close()
        assert lines(path) == ["other", "after"]

    def test_an_unlinked_file_is_made_again(self, tmp_path: Path) -> None:
        """The file deleted: the next line makes it again at the path."""
        path = tmp_path / "t.log"
        sink = written(path)
        sink.write("before")
        path.unlink()
        sink.write("after")
        sink.close()
        assert lines(path) == ["after"]

    def test_a_touched_file_keeps_its_lines_and_is_still_followed(self, tmp_path: Path) -> None:
        """A chmod (an event that moves nothing) leaves the lines in the file, and a rename after it
        is still followed."""
        path = tmp_path / "t.log"
        sink = written(path)
        sink.write("one")
        path.chmod(0o600)
        sink.write("two")
        path.rename(tmp_path / "t.log.1")
        sink.write("three")
        sink.close()
        assert lines(tmp_path / "t.log.1") == ["one", "two"]
        assert lines(path) == ["three"]

    def test_a_forked_child_and_its_parent_both_follow_a_rename(self, tmp_path: Path) -> None:
        """A rename after a fork is followed by both processes: each reads its own events (with one
        queue shared, whichever read it first would leave the other writing to the moved file)."""
        path = tmp_path / "t.log"
        sink = written(path)
        sink.write("before")
        ready, go = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: writes once the parent has renamed the file and written
            try:
                os.read(ready, 1)
                sink.write("child")
            finally:
                os._exit(0)
        path.rename(tmp_path / "t.log.1")
        sink.write("parent")
        os.write(go, b"x")
        os.waitpid(pid, 0)
        sink.close()
        assert lines(tmp_path / "t.log.1") == ["before"]
        assert sorted(lines(path)) == ["child", "parent"]


@linux_only
class TestWhatAWatchCanMiss:
    def test_a_relative_path_stays_the_file_it_named_after_a_chdir(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative path is the file it named when it was opened, whatever the working directory
        becomes (Hydra changes it): lines stay there, and a rotation reopens that path."""
        first, second = tmp_path / "a", tmp_path / "b"
        first.mkdir()
        second.mkdir()
        monkeypatch.chdir(first)
        sink = written(Path("logs/m.log"))
        sink.write("one")
        monkeypatch.chdir(second)
        sink.write("two")
        (first / "logs/m.log").rename(first / "logs/m.log.1")
        sink.write("three")
        sink.close()
        assert lines(first / "logs/m.log.1") == ["one", "two"]
        assert lines(first / "logs/m.log") == ["three"]
        assert not (second / "logs").exists()

    def test_a_dot_dot_after_a_symbolic_link_is_where_the_link_points(self, tmp_path: Path) -> None:
        """``two/link/../d/m.log`` with ``link -> x/y`` is ``x/d/m.log``: when ``x/d`` is moved away
        and made again, the next line goes to the new ``x/d/m.log`` (the text's ``two/d`` is no
        directory of the file's, so no watch on it can stand in for the stat)."""
        (tmp_path / "x/y").mkdir(parents=True)
        (tmp_path / "x/d").mkdir()
        (tmp_path / "two/d").mkdir(parents=True)
        (tmp_path / "two/link").symlink_to(tmp_path / "x/y")
        sink = written(tmp_path / "two/link/../d/m.log")
        sink.write("one")
        (tmp_path / "x/d").rename(tmp_path / "x/d_old")
        (tmp_path / "x/d").mkdir()
        sink.write("two")
        sink.close()
        assert lines(tmp_path / "x/d_old/m.log") == ["one"]
        assert lines(tmp_path / "x/d/m.log") == ["two"]
        assert not (tmp_path / "two/d/m.log").exists()

    def test_a_forked_child_holds_no_inotify_instance_until_it_writes(self, tmp_path: Path) -> None:
        """A forked child (a DataLoader worker) that never writes holds none of inotify's per-user
        instances: its first write makes its own watches."""
        script = textwrap.dedent(
            f"""
            import os
            from speedtronic.sinks import LineFile

            def inotify_fds():
                fds = os.listdir("/proc/self/fd")
                return sum(os.readlink(f"/proc/self/fd/{{fd}}") == "anon_inode:inotify"
                           for fd in fds if os.path.exists(f"/proc/self/fd/{{fd}}"))

            sink = LineFile({str(tmp_path / "m.log")!r}, lambda *args: None)
            sink.write("parent")
            assert inotify_fds() == 1, inotify_fds()
            pid = os.fork()
            if pid == 0:
                before = inotify_fds()
                sink.write("child")
                os._exit(0 if (before, inotify_fds()) == (0, 1) else 3)
            assert os.waitpid(pid, 0)[1] == 0
            print("ok")
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "ok"

    def test_a_descriptor_closed_behind_the_sinks_back_never_hangs_a_write(self, tmp_path: Path) -> None:
        """When another library closes the watches' descriptor (``closerange``, a daemon context) and
        its number goes to a pipe holding data, a write still returns (one read per poll: it never
        waits on a descriptor that isn't inotify's)."""
        script = textwrap.dedent(
            f"""
            import os
            from speedtronic.sinks import LineFile

            sink = LineFile({str(tmp_path / "m.log")!r}, lambda *args: None)
            sink.write("one")
            watches = sink._events._fd
            read, write = os.pipe()
            os.write(write, b"x" * 10)
            os.dup2(read, watches)  # the number now names a blocking pipe with data
            sink.write("two")
            print("returned")
            """
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert result.stdout.strip() == "returned", result.stderr
        assert lines(tmp_path / "m.log") == ["one", "two"]


@linux_only
class TestStatBeforeEveryWrite:
    def test_a_path_through_a_symbolic_link_follows_a_retargeted_link(self, tmp_path: Path) -> None:
        """A path through a symbolic link makes no event when the link is retargeted: it is stat'ed
        before every write, so the next line goes to the link's new target."""
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        (tmp_path / "latest").symlink_to(tmp_path / "a")
        sink = written(tmp_path / "latest" / "t.log")
        assert sink._events is None
        sink.write("in a")
        (tmp_path / "latest").unlink()
        (tmp_path / "latest").symlink_to(tmp_path / "b")
        sink.write("in b")
        sink.close()
        assert lines(tmp_path / "a" / "t.log") == ["in a"]
        assert lines(tmp_path / "b" / "t.log") == ["in b"]

    @linux_only
    def test_a_file_system_not_known_local_is_stat_ed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file on a file system whose changes may come from another machine (NFS here, as
        /proc/self/mountinfo would say) is stat'ed before every write, and a rename is followed."""
        device = os.stat(tmp_path).st_dev
        kinds = {(os.major(device), os.minor(device)): "nfs4"}
        monkeypatch.setattr(speedtronic.sinks, "_file_system_kinds", lambda: kinds)
        assert_stat_ed_and_followed(tmp_path / "t.log")

    @linux_only
    def test_inotify_refused_falls_back_to_the_stat(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """inotify refused (its per-user limit of instances reached): the stat before every write,
        and a rename is followed."""

        class Exhausted:
            def inotify_init1(self, flags: int) -> int:
                return -1  # EMFILE

        monkeypatch.setattr(speedtronic.sinks, "_inotify", Exhausted)
        assert_stat_ed_and_followed(tmp_path / "t.log")
