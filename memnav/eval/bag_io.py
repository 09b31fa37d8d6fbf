"""Reading and writing rosbag2 recordings without ROS (pure Python, over `rosbags`).

`BagFile(path)` opens, read-only, any of
- a rosbag2 folder (metadata.yaml, metadata versions 1-9, sqlite3 or mcap storage, zstd compression), as
  written by `ros2 bag record` of Humble, Iron, Jazzy or Kilted, by `memnav record` or by `rosbags`;
- a single `.mcap` file (profile "ros2", e.g. written by the `mcap` + `mcap-ros2-support` libraries or
  by rosbag2 without its folder) or a single `.db3` file;
- a folder without metadata.yaml that holds one `.mcap` or `.db3` file (a recording whose recorder was killed
  before it wrote the metadata), or several: the files of one recording split by size or duration
  (`ros2 bag record --max-bag-size/--max-bag-duration`, `bag_0.mcap`, `bag_1.mcap`, ...); the same files can also
  be given as a list of paths.

Split recording without metadata: the files are read as one bag, their messages merged in log-time order (as
rosbags' `AnyReader` merges several bags; rosbags' own `Reader` reads several files only through metadata.yaml's
`relative_file_paths`), and listed in the order of their first message (the file name breaks ties, numbers by
value: bag_2 before bag_10). Each file is checked and salvaged as a single one would be (a last file cut short by
a killed recorder is read up to the damage). Files that cannot be parts of one recording are refused: .mcap and
.db3 files together, or two files that hold the same topic over the same stretch of time (two robots' recordings,
or two recordings of one robot at once) beyond `SPLIT_OVERLAP_S`; a gap of more than `SPLIT_GAP_S` between one
file's last message and the next one's first is warned about (a part missing, or another recording).

Message types are resolved by a typestore built for the bag's ROS distribution (from `ros_distro` in
the metadata, else the metadata version: 5 Humble, 6-7 Iron, else Kilted), overlaid with the message
definitions stored in the bag itself (mcap schemas, sqlite3 `message_definitions`), so custom types
of other projects decode too.

Robust iteration (`BagFile.messages`): a message of a type no definition is known for, or whose bytes
do not deserialize, is skipped and counted per topic (`ReadCounts`); log times going backwards are
counted; a `.mcap` file cut short (no footer, a partial chunk: a recorder killed mid-write) is read up
to the damage with a streaming reader and flagged `truncated`. A `.db3` file shorter than its SQLite
header says (cut short) raises `BagError` naming it, since SQLite would read the missing bytes as zeros
and hand out damaged messages without an error; damage SQLite detects while reading ends iteration
with `truncated` set. A file that is not a bag at all raises `BagError` naming it. Nothing is ever
written to the input: sqlite3 files are opened immutable, mcap files read-only; a `.db3` with a non-empty
`-wal` file beside it (a recorder in WAL mode, rosbag2's `resilient` preset, killed or still running) is read
from a temporary copy with the log applied, with a warning, since an immutable open ignores the log.

`BagWriter` writes rosbag2 folders (metadata version 8, which the `ros2 bag` tools of Humble, Jazzy
and Kilted all read; version 9 stores QoS profiles in a layout Humble does not parse) with mcap or
sqlite3 storage. A writer that fails before it finishes removes the folder it created when no message is in
it yet; a bag that holds messages is kept (a partial recording is still a bag). A folder that existed before
is never written to or removed. sqlite3 storage is committed every `SQLITE_COMMIT_S` seconds (or
`SQLITE_COMMIT_BYTES`), so a writer killed, or one whose disk fills, loses at most that last part: `rosbags` alone
commits only at close, and a killed or failed writer then kept no message at all. A message that cannot be written
(disk full, file too large) raises `BagError` naming the bag and what it keeps.
"""
from __future__ import annotations

import contextlib
import heapq
import math
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BagError", "BagFile", "BagMessage", "BagWriter", "ReadCounts", "STORAGES", "TopicInfo",
           "UnknownTypeError", "typestore_for_distro"]

STORAGES = ("mcap", "sqlite3")

# ROS distribution name -> rosbags store name
_DISTRO_STORES = {"humble": "ros2_humble", "iron": "ros2_iron", "jazzy": "ros2_jazzy", "kilted": "ros2_kilted",
                  "rolling": "ros2_kilted", "foxy": "ros2_foxy", "galactic": "ros2_galactic"}
DEFAULT_DISTRO = "kilted"
WRITER_METADATA_VERSION = 8
SQLITE_COMMIT_S = 1.0              # a killed writer loses at most about this much of a sqlite3 bag, seconds
SQLITE_COMMIT_BYTES = 16 << 20     # ... or this much message data, bytes
_SQLITE_CACHE_KIB = 64 << 10       # > SQLITE_COMMIT_BYTES: uncommitted pages never spill into the file
SPLIT_OVERLAP_S = 1.0   # split files holding one topic over a longer common stretch are not parts of one recording
SPLIT_GAP_S = 10.0      # a longer silence between consecutive split files is warned about (a part missing?)


class BagError(RuntimeError):
    """A bag cannot be opened or read (names the file and what is wrong with it)."""


class UnknownTypeError(BagError):
    """A message type has no definition in the typestore or in the bag."""


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a bag.

    Attributes:
        name: topic name.
        msgtype: ROS message type, e.g. "sensor_msgs/msg/Image".
        count: messages in the bag (from its index or metadata; 0 when unknown).
        known: whether the type can be deserialized (definition in the typestore or the bag).
        qos: offered QoS profiles recorded with the topic (rosbags `Qos` tuples), may be empty.
    """

    name: str
    msgtype: str
    count: int
    known: bool
    qos: tuple = ()


@dataclass
class BagMessage:
    """One message read from a bag.

    Attributes:
        topic: topic name.
        msgtype: ROS message type.
        log_time_ns: the time the recorder received it, ns.
        raw: the serialized message (CDR).
        msg: the deserialized message (rosbags dataclass), or None when not decoded.
    """

    topic: str
    msgtype: str
    log_time_ns: int
    raw: bytes
    msg: Any = None


@dataclass
class ReadCounts:
    """What iteration read and skipped, per topic.

    Attributes:
        read: messages yielded.
        unknown_type: messages skipped because no definition of their type is known.
        deserialize_error: messages skipped because their bytes did not deserialize.
        log_time_out_of_order: messages whose log time is earlier than that of a message read before them
            (not skipped for it; indexed files are read in log-time order, so only salvaged ones have them).
        truncated: the storage file ended early or is damaged; messages after the damage are lost.
        truncated_reason: what the reader found at the damage.
    """

    read: Counter = field(default_factory=Counter)
    unknown_type: Counter = field(default_factory=Counter)
    deserialize_error: Counter = field(default_factory=Counter)
    log_time_out_of_order: int = 0
    truncated: bool = False
    truncated_reason: str = ""

    def to_json(self) -> dict:
        return {"read": dict(sorted(self.read.items())), "unknown_type": dict(sorted(self.unknown_type.items())),
                "deserialize_error": dict(sorted(self.deserialize_error.items())),
                "log_time_out_of_order": self.log_time_out_of_order, "truncated": self.truncated,
                "truncated_reason": self.truncated_reason}


def typestore_for_distro(distro: str | None = None):
    """A fresh rosbags typestore with the standard messages of a ROS 2 distribution (default Kilted).

    Raises:
        ValueError: an unknown distribution name.
    """
    from rosbags.typesys import Stores, get_typestore

    name = (distro or DEFAULT_DISTRO).lower()
    if name not in _DISTRO_STORES:
        raise ValueError(f"unknown ROS distribution {distro!r}; expected one of {sorted(_DISTRO_STORES)}")
    return get_typestore(Stores(_DISTRO_STORES[name]))


def _distro_of(ros_distro: str | None, metadata_version: int | None) -> str:
    if ros_distro and ros_distro.lower() in _DISTRO_STORES:
        return ros_distro.lower()
    if metadata_version is not None and metadata_version <= 5:
        return "humble"
    if metadata_version in (6, 7):
        return "iron"
    return DEFAULT_DISTRO


def _parse_definition(msgtype: str, fmt: str, text: str) -> dict:
    """Types (rosbags parse trees) defined by one stored message definition ("MSG" or "IDL" format)."""
    from rosbags.typesys import get_types_from_idl, get_types_from_msg

    if fmt == "MSG":
        return dict(get_types_from_msg(text, msgtype))
    sep = "=" * 80 + "\n"
    types: dict = {}
    if text.startswith(f"{sep}IDL: "):
        for part in text.split(sep)[1:]:
            _, idl = part.split("\n", 1)
            types.update(get_types_from_idl(idl))
    else:
        types.update(get_types_from_idl(text))
    return types


def _same_fields(a: tuple, b: tuple) -> bool:
    return [(x[0].lower(), x[1]) for x in a[1]] == [(x[0].lower(), x[1]) for x in b[1]]


def build_typestore(distro: str, definitions: Iterable[tuple[str, str, str]]) -> tuple[Any, list[str]]:
    """The distribution's typestore overlaid with definitions stored in a bag.

    Args:
        distro: ROS distribution whose standard messages form the base.
        definitions: (msgtype, format "MSG"/"IDL", text) of each definition found in the bag.

    Returns:
        (typestore, warnings): definitions that do not parse are left out with a warning; a stored
        definition that differs from the distribution's replaces it (the bag was written with it).
    """
    from rosbags.typesys import get_typestore
    from rosbags.typesys.stores import Stores

    base = typestore_for_distro(distro)
    overlay: dict = {}
    warnings: list[str] = []
    for msgtype, fmt, text in definitions:
        if not text.strip():
            continue
        try:
            overlay.update(_parse_definition(msgtype, fmt, text))
        except Exception as err:  # noqa: BLE001 - a foreign definition may be malformed in any way
            warnings.append(f"definition of {msgtype} stored in the bag does not parse ({err}); "
                            f"using the {distro} definition if there is one")
    if not overlay:
        return base, warnings
    conflicts = [name for name, tree in overlay.items()
                 if name in base.fielddefs and not _same_fields(base.fielddefs[name], tree)]
    if not conflicts:
        new = {k: v for k, v in overlay.items() if k not in base.fielddefs}
        if new:
            base.register(new)
        return base, warnings
    merged = dict(base.fielddefs)
    merged.update(overlay)
    store = get_typestore(Stores.EMPTY)
    store.register(merged)
    return store, warnings


def _natural_key(name: str) -> tuple:
    """Sort key of a file name with its numbers by value (bag_2 before bag_10)."""
    return tuple((0, int(s), "") if s.isdigit() else (1, 0, s) for s in re.split(r"(\d+)", name) if s)


_MCAP_MAGIC = b"\x89MCAP0\r\n"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_sqlite_size(path: Path) -> None:
    """Raise BagError when an SQLite file is shorter than the page count in its header says.

    SQLite reads the missing bytes of a cut-short file as zeros: rows there come back damaged without an
    error. A header that is missing or not maintained (old SQLite) is left to the reader to judge.
    """
    with path.open("rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        return
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size = path.stat().st_size
    if pages and head[24:28] == head[92:96] and size < pages * page_size:   # the size field is valid
        raise BagError(f"{path}: the SQLite file is cut short: {size} bytes, but its header says {pages} pages "
                       f"of {page_size} bytes ({pages * page_size} bytes); not read, as SQLite would return "
                       "the missing part as zeros")


class BagFile:
    """A rosbag2 recording opened read-only (see the module docstring for what is accepted).

    Args:
        path: rosbag2 folder, `.mcap` file or `.db3` file, or a list of `.mcap` or `.db3` files: the parts of one
            split recording.
        distro: ROS distribution whose standard message definitions decode the bag; None picks it from
            the bag's metadata (default Kilted).

    Attributes:
        path: the bag as given (for a list of files: their folder, when they share one, else the first file).
        parts: the storage files of a split recording read without metadata.yaml, in reading order; [] otherwise.

    Raises:
        FileNotFoundError: `path` (or a file of the list) does not exist.
        BagError: `path` is not a readable bag (naming the file and the reason), or its files are not the parts of
            one recording.
    """

    def __init__(self, path: Path | str | Sequence[Path | str], distro: str | None = None) -> None:
        files: list[Path] | None = None
        if not isinstance(path, (str, os.PathLike)):
            files = [Path(p) for p in path]
            if not files:
                raise BagError("no bag given: an empty list of files")
            if len(files) == 1:
                path, files = files[0], None
            else:
                for f in files:
                    if not f.exists():
                        raise FileNotFoundError(f"bag file {f} does not exist")
                parents = {f.parent for f in files}
                path = files[0].parent if len(parents) == 1 else files[0]
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"bag {self.path} does not exist")
        self.warnings: list[str] = []
        self.counts = ReadCounts()
        self.metadata_version: int | None = None
        self.ros_distro: str | None = None
        self._reader: Any = None
        self._copy_dir: Any = None              # a temporary copy with a .db3's write-ahead log applied
        self._stream_path: Path | None = None   # salvage mode: a damaged .mcap read sequentially
        self._stream_topics: dict[str, TopicInfo] = {}
        self._stream_definitions: list[tuple[str, str, str]] = []
        self._stream_span: tuple[int, int] | None = None   # salvage mode: first and last log time read
        self._parts: list[BagFile] = []         # a split recording without metadata: one BagFile per file
        self._metadata_storage = ""
        if files is None:
            self.storage_path = self._resolve_storage()
            files = self._split_files if self.storage_path.is_dir() and self._split_files else None
        if files is not None:
            self._open_parts(files, distro)
            return
        self._open()
        if self.storage_path.is_dir():
            self.storage = self._metadata_storage or "unknown"
        else:
            self.storage = "mcap" if self.storage_path.suffix == ".mcap" else "sqlite3"
        self.distro = distro.lower() if distro else _distro_of(self.ros_distro, self.metadata_version)
        self.typestore, warnings = build_typestore(self.distro, self._definitions())
        self.warnings += warnings
        # facts kept after close()
        self._topics = self._read_topics()
        if self._stream_path is not None:
            self._count, self._span = sum(i.count for i in self._stream_topics.values()), None
        else:
            self._count = int(self._reader.message_count)
            self._span = (int(self._reader.start_time), int(self._reader.end_time) - 1) if self._count else None

    # -- opening -----------------------------------------------------------------------------------------

    def _resolve_storage(self) -> Path:
        """The storage file to read (the folder itself when it has metadata.yaml, or when it holds the files of a
        split recording without one: they are left in `_split_files`)."""
        p = self.path
        self._split_files: list[Path] = []
        if p.is_dir():
            if (p / "metadata.yaml").is_file():
                return p
            files = sorted([*p.glob("*.mcap"), *p.glob("*.db3")], key=lambda f: _natural_key(f.name))
            files = [f for f in files if f.is_file()]
            if not files:
                raise BagError(f"{p}: not a rosbag2 folder (no metadata.yaml) and holds no .mcap or .db3 file")
            if len(files) > 1:
                self._split_files = files
                return p
            self.warnings.append(f"{p} has no metadata.yaml (recorder killed?); reading {files[0].name} directly")
            return files[0]
        if p.suffix not in (".mcap", ".db3"):
            raise BagError(f"{p}: unsupported bag file; expected a rosbag2 folder, a .mcap or a .db3 file")
        return p

    def _open_parts(self, files: list[Path], distro: str | None) -> None:
        """Open the files of a split recording (see the module docstring): one BagFile each, in reading order."""
        resolved: dict[Path, Path] = {}
        for f in files:
            if f.is_dir():
                raise BagError(f"{f}: a folder among several bag files; give the .mcap or .db3 files of one "
                               "recording, or its folder alone")
            if f.suffix not in (".mcap", ".db3"):
                raise BagError(f"{f}: unsupported bag file; expected a .mcap or a .db3 file")
            if (r := f.resolve()) in resolved:
                raise BagError(f"{f}: given twice (as {resolved[r]} too); give each file of the recording once")
            resolved[r] = f
        suffixes = sorted({f.suffix for f in files})
        if len(suffixes) > 1:
            raise BagError(f"{self.path}: both .mcap and .db3 files ({', '.join(f.name for f in files)}): not the "
                           "parts of one recording, which uses one storage; give the files of one recording, "
                           "or one file")
        self.storage_path = self.path
        self.storage = "mcap" if suffixes == [".mcap"] else "sqlite3"
        # a recorder killed just after it opened its next split file leaves that file empty: the parts before it
        # are the recording (an empty file alone, or all of them, is still refused by name)
        empty = [f for f in files if f.stat().st_size == 0]
        if empty and len(empty) < len(files):
            files = [f for f in files if f not in empty]
            self.warnings.append(f"{', '.join(str(f) for f in empty)}: empty, left out (a recorder stopped just after "
                                 "it began the file); reading the other parts")
        try:
            for f in files:
                self._parts.append(BagFile(f, distro=distro))
            self._parts.sort(key=lambda b: (b._first_ns(), _natural_key(b.path.name)))
            self._check_parts()
        except BaseException:
            self.close()
            raise
        names = [b.path.name for b in self._parts]
        names = ", ".join(names if len(names) <= 12 else [*names[:5], "...", *names[-5:]])   # all: describe()
        where = "has no metadata.yaml" if self.path.is_dir() else "is given as several files"
        self.warnings.append(f"{self.path} {where}: reading its {len(self._parts)} {self.storage} files as the "
                             f"parts of one split recording, in the order of their first message: {names}")
        for part in self._parts:
            self.warnings += part.warnings
        self.distro = distro.lower() if distro else _distro_of(None, None)
        unique = dict.fromkeys(d for part in self._parts for d in part._definitions())
        self.typestore, warnings = build_typestore(self.distro, unique)
        self.warnings += warnings
        self._topics = self._read_topics()
        self._count = sum(part.message_count for part in self._parts)
        spans = [s for part in self._parts if (s := part._known_span()) is not None]
        self._span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None

    def _first_ns(self) -> float:
        """Log time of the first message (math.inf for an empty file), also for one read sequentially."""
        span = self._known_span()
        return math.inf if span is None else span[0]

    def _known_span(self) -> tuple[int, int] | None:
        return self._span if self._stream_path is None else self._stream_span

    def _check_parts(self) -> None:
        """Refuse files that hold one topic over a common stretch of time; warn about a gap between two files."""
        spans = [(part, span, {t for t, i in part.topics.items() if i.count})
                 for part in self._parts if (span := part._known_span()) is not None]
        for k, (a, (a0, a1), a_topics) in enumerate(spans):
            for b, (b0, b1), b_topics in spans[k + 1:]:
                overlap_ns = min(a1, b1) - max(a0, b0)
                shared = sorted(a_topics & b_topics)
                if shared and overlap_ns > SPLIT_OVERLAP_S * 1e9:
                    raise BagError(
                        f"{a.path.name} and {b.path.name} both hold {', '.join(shared[:3])}"
                        f"{' ...' if len(shared) > 3 else ''} over the same {overlap_ns / 1e9:.1f} s: not the parts "
                        "of one split recording, whose files follow one another in time (two robots' recordings, "
                        "or two recordings at once?); give the files of one recording, or read each on its own")
        for (a, (_, a1), _), (b, (b0, _), _) in zip(spans, spans[1:]):
            if b0 - a1 > SPLIT_GAP_S * 1e9:
                self.warnings.append(f"{(b0 - a1) / 1e9:.1f} s pass between the last message of {a.path.name} and "
                                     f"the first of {b.path.name}: a part of the recording missing, or files of "
                                     "two recordings?")

    def _open(self) -> None:
        from rosbags.rosbag2 import Reader, ReaderError

        target = self.storage_path
        if target.is_dir():
            self._read_metadata_fields(target / "metadata.yaml")
            for db3 in sorted(target.glob("*.db3")):
                _check_sqlite_size(db3)
        else:
            self._check_magic(target)
            if target.suffix == ".db3":
                _check_sqlite_size(target)
        target = self._with_wal_applied(target)
        try:
            reader = Reader(target)
            reader.open()
        except (ReaderError, KeyError, ValueError, OSError, AssertionError, IndexError, TypeError) as err:
            mcap_file = self._single_mcap(target)
            if mcap_file is None:
                raise BagError(f"{target}: cannot read bag: {err}") from err
            self.warnings.append(f"{mcap_file.name}: {err}; reading it sequentially up to the damage")
            self._open_stream(mcap_file)
            return
        except Exception as err:  # apsw / sqlite errors have no common base with the above
            raise BagError(f"{target}: cannot read bag: {type(err).__name__}: {err}") from err
        self._reader = reader

    def _with_wal_applied(self, target: Path) -> Path:
        """`target`, or a temporary copy of it in which the write-ahead log of its .db3 files is applied.

        rosbags opens .db3 files immutable, which ignores a `-wal` file beside them: the messages a recorder in
        WAL mode (rosbag2's `resilient` storage preset) committed since its last checkpoint live only there
        while it runs, and stay there when it is killed. The input is not written: the files are copied, the
        copy checkpointed, and the copy read (removed at close)."""
        db3s = sorted(target.glob("*.db3")) if target.is_dir() else [target] if target.suffix == ".db3" else []
        logged = [db for db in db3s if (wal := db.with_name(db.name + "-wal")).is_file() and wal.stat().st_size]
        if not logged:
            return target
        import sqlite3
        import tempfile

        self._copy_dir = tempfile.TemporaryDirectory(prefix="memnav-bag-")
        copy_root = Path(self._copy_dir.name)
        try:
            if target.is_dir():
                copy = copy_root / target.name
                copy.mkdir()
                for f in target.iterdir():
                    if f.is_file() and not f.name.endswith("-shm"):
                        shutil.copy2(f, copy / f.name)
                copied = [copy / db.name for db in logged]
            else:
                copy = copy_root / target.name
                shutil.copy2(target, copy)
                shutil.copy2(target.with_name(target.name + "-wal"), copy_root / (target.name + "-wal"))
                copied = [copy]
            for db in copied:
                con = sqlite3.connect(db)
                try:
                    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    con.execute("PRAGMA journal_mode=DELETE")
                finally:
                    con.close()
        except (OSError, sqlite3.Error) as err:
            self._copy_dir.cleanup()
            self._copy_dir = None
            raise BagError(f"{target}: cannot apply the write-ahead log of {', '.join(db.name for db in logged)} "
                           f"(a temporary copy in {copy_root.parent}): {err}") from err
        self.warnings.append(f"{', '.join(db.name + '-wal' for db in logged)}: messages not yet checkpointed into "
                             "the .db3 (a recorder in WAL mode, killed or still running); read from a temporary "
                             "copy with the log applied")
        return copy

    def _single_mcap(self, target: Path) -> Path | None:
        """The one .mcap file a damaged bag consists of (salvage candidate), else None."""
        if target.suffix == ".mcap":
            return target
        files = sorted(target.glob("*.mcap")) if target.is_dir() else []
        return files[0] if len(files) == 1 else None

    def _check_magic(self, path: Path) -> None:
        with path.open("rb") as f:
            head = f.read(16)
        if not head:
            raise BagError(f"{path}: the file is empty")
        if path.suffix == ".mcap" and not head.startswith(_MCAP_MAGIC):
            raise BagError(f"{path}: not an MCAP file (bad magic bytes)")
        if path.suffix == ".db3" and not head.startswith(_SQLITE_MAGIC):
            raise BagError(f"{path}: not an SQLite database (bad header)")

    def _read_metadata_fields(self, yaml_path: Path) -> None:
        import yaml

        try:
            doc = yaml.safe_load(yaml_path.read_text())
            info = doc["rosbag2_bagfile_information"]
            self.metadata_version = int(info["version"])
            self._metadata_storage = str(info.get("storage_identifier", ""))
            distro = info.get("ros_distro")
            self.ros_distro = str(distro) if distro else None
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
            raise BagError(f"{yaml_path}: not a rosbag2 metadata file: {err}") from err

    def _open_stream(self, path: Path) -> None:
        """Salvage mode: index a damaged .mcap by reading it sequentially (schemas, channels, counts)."""
        try:
            import mcap  # noqa: F401
        except ImportError as err:
            raise BagError(f"{path}: the file is damaged and reading it sequentially needs the `mcap` package "
                           f"(pip install mcap)") from err
        with path.open("rb") as f:
            if f.read(8) != _MCAP_MAGIC:
                raise BagError(f"{path}: not an MCAP file (bad magic bytes)")
        self._stream_path = path
        counts: Counter = Counter()
        channels: dict[str, str] = {}
        first = last = None
        for kind, payload in self._stream_records(path, count_only=True):
            if kind == "schema":
                self._stream_definitions.append(payload)
            elif kind == "channel":
                channels.setdefault(payload[0], payload[1])
            elif kind == "message":
                counts[payload[0]] += 1
                t = int(payload[2])
                first, last = (t, t) if first is None else (min(first, t), max(last, t))
        if first is not None:
            self._stream_span = (first, last)
        self._stream_topics = {t: TopicInfo(t, mt, counts[t], False) for t, mt in channels.items()}

    def _stream_records(self, path: Path, count_only: bool = False) -> Iterator[tuple[str, tuple]]:
        """Yield ("schema", (name, fmt, text)), ("channel", (topic, type)), ("message", (topic, type, t, data))
        in file order until the end or the first damage (then sets counts.truncated)."""
        from mcap.records import Channel, Message, Schema
        from mcap.stream_reader import StreamReader

        schemas: dict[int, tuple[str, str, str]] = {}
        channels: dict[int, tuple[str, str]] = {}
        with path.open("rb") as f:
            reader = StreamReader(f, skip_magic=False, record_size_limit=1 << 31)
            try:
                for rec in reader.records:
                    if isinstance(rec, Schema):
                        fmt = "IDL" if rec.encoding == "ros2idl" else "MSG"
                        schemas[rec.id] = (rec.name, fmt, rec.data.decode(errors="replace"))
                        yield "schema", schemas[rec.id]
                    elif isinstance(rec, Channel):
                        name = schemas.get(rec.schema_id, ("", "", ""))[0]
                        if rec.message_encoding != "cdr":
                            self.warnings.append(f"{path.name}: topic {rec.topic} uses message encoding "
                                                 f"{rec.message_encoding!r}, not cdr; skipped")
                            continue
                        channels[rec.id] = (rec.topic, name)
                        yield "channel", channels[rec.id]
                    elif isinstance(rec, Message):
                        ch = channels.get(rec.channel_id)
                        if ch is None:
                            continue
                        yield "message", (ch[0], ch[1], rec.log_time, b"" if count_only else rec.data)
            except Exception as err:  # noqa: BLE001 - any damage ends the readable part
                reason = f"{type(err).__name__} {err}".strip()
                if count_only:
                    self.warnings.append(f"{path.name}: the readable part ends at a damaged or missing record "
                                         f"({reason}); later messages are lost")
                else:
                    self.counts.truncated = True
                    self.counts.truncated_reason = reason

    def _definitions(self) -> list[tuple[str, str, str]]:
        if self._parts:
            return list(dict.fromkeys(d for part in self._parts for d in part._definitions()))
        if self._stream_path is not None:
            return list(self._stream_definitions)
        from rosbags.interfaces import MessageDefinitionFormat

        out = []
        for conn in self._reader.connections:
            if conn.msgdef.format in (MessageDefinitionFormat.MSG, MessageDefinitionFormat.IDL):
                out.append((conn.msgtype, conn.msgdef.format.name, conn.msgdef.data))
        return out

    # -- information ---------------------------------------------------------------------------------------

    def _read_topics(self) -> dict[str, TopicInfo]:
        types = self.typestore.types
        if self._parts:
            out: dict[str, TopicInfo] = {}
            for part in self._parts:
                for t, i in part.topics.items():
                    prev = out.get(t)
                    out[t] = TopicInfo(t, i.msgtype, i.count, i.msgtype in types, i.qos) if prev is None else \
                        TopicInfo(t, prev.msgtype, prev.count + i.count, prev.known, prev.qos or i.qos)
            return out
        if self._stream_path is not None:
            return {t: TopicInfo(t, i.msgtype, i.count, i.msgtype in types) for t, i in self._stream_topics.items()}
        out: dict[str, TopicInfo] = {}
        for conn in self._reader.connections:
            if conn.topic in out:
                prev = out[conn.topic]
                out[conn.topic] = TopicInfo(prev.name, prev.msgtype, prev.count + conn.msgcount, prev.known, prev.qos)
                continue
            qos = tuple(getattr(conn.ext, "offered_qos_profiles", []) or [])
            out[conn.topic] = TopicInfo(conn.topic, conn.msgtype, conn.msgcount, conn.msgtype in types, qos)
        return out

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """Topic name -> TopicInfo (a topic recorded with two types keeps the first)."""
        return dict(self._topics)

    @property
    def message_count(self) -> int:
        """Messages in the bag according to its index or metadata (counted when read sequentially)."""
        return self._count

    @property
    def start_ns(self) -> int | None:
        """Log time of the first message (None when empty or read sequentially)."""
        return None if self._span is None else self._span[0]

    @property
    def end_ns(self) -> int | None:
        """Log time of the last message (None when empty or read sequentially)."""
        return None if self._span is None else self._span[1]

    @property
    def format(self) -> str:
        """"rosbag2" (folder with metadata), "mcap" or "sqlite3" (bare storage files, one or the parts of a split
        recording)."""
        return "rosbag2" if self.storage_path.is_dir() and not self._parts else self.storage

    @property
    def parts(self) -> list[Path]:
        """The storage files of a split recording read without metadata.yaml, in reading order; [] otherwise."""
        return [part.path for part in self._parts]

    @property
    def salvaged(self) -> bool:
        """Whether a damaged .mcap (one of the parts) is read sequentially, up to the damage."""
        return self._stream_path is not None or any(part.salvaged for part in self._parts)

    def describe(self) -> dict:
        """JSON-ready summary: path, format, storage, parts (of a split recording without metadata, else null),
        metadata version, distro, counts, topics."""
        return {"path": str(self.path), "format": self.format, "storage": self.storage,
                "parts": [str(p) for p in self.parts] or None,
                "metadata_version": self.metadata_version, "ros_distro": self.ros_distro,
                "typestore_distro": self.distro, "message_count": self.message_count,
                "salvaged": self.salvaged,
                "topics": {t: {"type": i.msgtype, "count": i.count, "known_type": i.known}
                           for t, i in sorted(self.topics.items())}}

    # -- reading ---------------------------------------------------------------------------------------------

    def messages(self, topics: Iterable[str] | None = None, decode: bool = True,
                 undefined_types: bool = False) -> Iterator[BagMessage]:
        """Messages of `topics` (all when None) in storage order (log-time order for indexed bags).

        Messages of unknown types or that fail to deserialize are skipped and counted in `counts`; a
        damaged file ends iteration early with `counts.truncated` set. `undefined_types` (with `decode` False):
        messages of types the bag stores no definition for come too, as bytes (a replay publishes them through
        the installed message class).
        """
        wanted = None if topics is None else set(topics)
        types = self.typestore.types
        last_t = -math.inf
        for topic, msgtype, t, raw in self._raw(wanted):
            if t < last_t:
                self.counts.log_time_out_of_order += 1
            last_t = max(last_t, t)
            if msgtype not in types and (decode or not undefined_types):
                self.counts.unknown_type[topic] += 1
                continue
            msg = None
            if decode:
                try:
                    msg = self.typestore.deserialize_cdr(raw, msgtype)
                except Exception:  # noqa: BLE001 - corrupt bytes raise many kinds of errors
                    self.counts.deserialize_error[topic] += 1
                    continue
            self.counts.read[topic] += 1
            yield BagMessage(topic, msgtype, t, raw, msg)

    def _raw(self, wanted: set[str] | None) -> Iterator[tuple[str, str, int, bytes]]:
        if self._parts:
            # merged by log time; equal times keep the parts' order (heapq.merge is stable)
            yield from heapq.merge(*(self._part_raw(part, wanted) for part in self._parts), key=lambda r: r[2])
            return
        if self._stream_path is not None:
            for kind, payload in self._stream_records(self._stream_path):
                if kind == "message" and (wanted is None or payload[0] in wanted):
                    yield payload
            return
        conns = [c for c in self._reader.connections if wanted is None or c.topic in wanted]
        if not conns:
            return
        it = self._reader.messages(connections=conns)
        while True:
            try:
                conn, t, raw = next(it)
            except StopIteration:
                return
            except Exception as err:  # noqa: BLE001 - a damaged page/chunk in the middle of the file
                self.counts.truncated = True
                self.counts.truncated_reason = f"{type(err).__name__}: {err}".strip()
                self.warnings.append(f"{self.storage_path}: reading stopped at damaged data: {err}")
                return
            yield conn.topic, conn.msgtype, int(t), bytes(raw)

    def _part_raw(self, part: BagFile, wanted: set[str] | None) -> Iterator[tuple[str, str, int, bytes]]:
        """One part's messages; at its end, the damage it met (truncation, warnings) becomes the bag's."""
        seen = len(part.warnings)
        yield from part._raw(wanted)
        self.warnings += part.warnings[seen:]
        if part.counts.truncated and not self.counts.truncated:
            self.counts.truncated = True
            self.counts.truncated_reason = f"{part.path.name}: {part.counts.truncated_reason}"

    def close(self) -> None:
        for part in self._parts:
            part.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._copy_dir is not None:
            self._copy_dir.cleanup()
            self._copy_dir = None

    def __enter__(self) -> BagFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------------------
# writing


def qos_profile(reliable: bool = True, transient_local: bool = False, depth: int = 10):
    """A rosbags `Qos` tuple for a topic's offered QoS in the bag metadata."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    infinite = QosTime(2147483647, 4294967295)
    return Qos(QosHistory.KEEP_LAST, depth, QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
               QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE, infinite, infinite,
               QosLiveliness.AUTOMATIC, infinite, False)


_TYPE_RE = re.compile(r"^[A-Za-z][\w]*/msg/[A-Za-z][\w]*$")


class BagWriter:
    """Writes a rosbag2 folder (metadata version 8) with mcap or sqlite3 storage.

    The folder is the writer's own: when opening it, writing the first message or finishing an empty bag fails,
    it is removed and the error re-raised. Leaving a `with` block by an exception, or `abandon()`, finishes a
    bag that holds messages and removes one that holds none.

    Args:
        path: the bag folder to create; it must not exist.
        storage: "mcap" (default) or "sqlite3".
        typestore: where message definitions come from (default: Kilted's standard messages).

    Raises:
        BagError: the folder exists, the storage is unknown, or the storage cannot be opened (the folder is then
            gone again).
        OSError: the folder or its storage file cannot be created (a folder made is then gone again).
    """

    def __init__(self, path: Path | str, storage: str = "mcap", typestore: Any = None) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer, WriterError

        if storage not in STORAGES:
            raise BagError(f"unknown storage {storage!r}; expected one of {STORAGES}")
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"{self.path} exists already; a bag is never overwritten")
        self.typestore = typestore if typestore is not None else typestore_for_distro(DEFAULT_DISTRO)
        self._conns: dict[str, Any] = {}
        self.counts: Counter = Counter()
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        try:
            self._writer = Writer(self.path, version=WRITER_METADATA_VERSION, storage_plugin=plugin)
        except WriterError as err:   # created by someone else since the check above: not ours to remove
            raise BagError(f"{self.path}: cannot create bag: {err}") from err
        try:
            self._writer.open()
        except WriterError as err:   # rosbags' open raises it only for a folder that exists already
            raise BagError(f"{self.path}: cannot create bag: {err}") from err
        except BaseException as err:
            if not self._failed_creating_folder(err):   # the folder is ours: its storage file failed
                shutil.rmtree(self.path, ignore_errors=True)
            if isinstance(err, OSError) or not isinstance(err, Exception):   # an OSError names its file already
                raise
            raise BagError(f"{self.path}: cannot create bag: {err}") from err   # e.g. sqlite3 cannot open it
        # sqlite3: rosbags commits only at close; commit as we go (see the module docstring)
        self._sqlite = getattr(self._writer.storage, "conn", None) if storage == "sqlite3" else None
        if self._sqlite is not None:
            self._sqlite.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KIB}")
        self._pending_bytes = 0
        self._last_commit = time.monotonic()
        self._committed: tuple = (Counter(), {}, self._writer.min_timestamp, self._writer.max_timestamp)

    def _failed_creating_folder(self, err: BaseException) -> bool:
        """Whether rosbags' `Writer.open` failed creating the bag folder itself (an OSError naming the folder or a
        parent of it), as opposed to failing after it made the folder (its storage file)."""
        if not isinstance(err, OSError) or err.filename is None:
            return False
        return Path(err.filename) in (self.path, *self.path.parents)

    def add_topic(self, topic: str, msgtype: str, qos: Iterable = ()) -> None:
        """Declare a topic (once). Raises UnknownTypeError when the typestore lacks `msgtype`."""
        if topic in self._conns:
            return
        if not _TYPE_RE.match(msgtype) or msgtype not in self.typestore.types:
            raise UnknownTypeError(f"topic {topic}: message type {msgtype!r} has no definition in the typestore")
        self._conns[topic] = self._writer.add_connection(topic, msgtype, typestore=self.typestore,
                                                         offered_qos_profiles=list(qos))
        self._commit(topic)   # a killed writer's messages are only readable with their topic

    def has_topic(self, topic: str) -> bool:
        return topic in self._conns

    def write_raw(self, topic: str, log_time_ns: int, raw: bytes) -> None:
        """Append one serialized (CDR) message to a declared topic."""
        conn = self._conns.get(topic)
        if conn is None:
            raise BagError(f"{self.path}: topic {topic} was not declared with add_topic")
        try:
            self._writer.write(conn, int(log_time_ns), raw)
        except Exception as err:   # noqa: BLE001 - disk full, file too large, I/O error: OSError or sqlite3.Error
            self._write_failed(topic, err)
        self.counts[topic] += 1
        self._pending_bytes += len(raw)
        if self._sqlite is not None and (self._pending_bytes >= SQLITE_COMMIT_BYTES
                                         or time.monotonic() - self._last_commit >= SQLITE_COMMIT_S):
            self._commit(topic)

    def _commit(self, topic: str) -> None:
        """Commit sqlite3 storage and remember what it then holds (nothing to do for mcap)."""
        if self._sqlite is None:
            return
        try:
            self._sqlite.commit()
        except Exception as err:   # noqa: BLE001 - sqlite3.Error: disk full, I/O error
            self._write_failed(topic, err)
        w = self._writer
        self._committed = (Counter(self.counts), dict(w.counts), w.min_timestamp, w.max_timestamp)
        self._pending_bytes = 0
        self._last_commit = time.monotonic()

    def _write_failed(self, topic: str, err: Exception) -> None:
        """Raise BagError for a message that could not be stored; for sqlite3, first roll back to the last commit
        so that the counts (and the metadata close() writes) say what the bag holds."""
        if self._sqlite is not None:
            with contextlib.suppress(Exception):
                self._sqlite.rollback()
            counts, writer_counts, self._writer.min_timestamp, self._writer.max_timestamp = self._committed
            self.counts, self._writer.counts = Counter(counts), dict(writer_counts)
            kept = f"the {sum(self.counts.values())} messages committed before it"
        else:
            kept = f"what it wrote before it (up to {sum(self.counts.values())} messages)"
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise BagError(f"{self.path}: cannot write a message of {topic} ({type(err).__name__}: {reason}); "
                       f"the bag keeps {kept}") from err

    def write(self, topic: str, msg: Any, log_time_ns: int, msgtype: str | None = None) -> None:
        """Serialize a rosbags message object and append it (declaring the topic on first use)."""
        msgtype = msgtype or msg.__msgtype__
        if topic not in self._conns:
            self.add_topic(topic, msgtype)
        self.write_raw(topic, log_time_ns, bytes(self.typestore.serialize_cdr(msg, msgtype)))

    def close(self) -> None:
        """Finish the storage file and write metadata.yaml. If that fails, a bag without messages is removed; one
        with messages is kept (its storage file reads without the metadata). The error is re-raised either way."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except BaseException:
            if not self.counts:
                self._remove(writer)
            raise

    def abandon(self) -> None:
        """After a failure elsewhere: finish a bag that holds messages (a partial recording is still a bag) and
        remove one that holds none. Never raises (the failure that led here is the one to report); does nothing
        once the bag is closed."""
        if self._writer is None:
            return
        if self.counts:
            with contextlib.suppress(Exception):
                self.close()
            return
        writer, self._writer = self._writer, None
        self._remove(writer)

    def _remove(self, writer: Any) -> None:
        """Close `writer`'s storage without finishing it and delete the bag folder (always this writer's own: the
        constructor refuses a folder that exists)."""
        with contextlib.suppress(Exception):
            writer.abort()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()
