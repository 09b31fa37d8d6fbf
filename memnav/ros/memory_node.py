"""memory_node: embeddings + odometry -> the scene-graph long-term memory (SQLite) and the working buffer.

Subscribes:
    /memnav/embedding           sensor_msgs/Image 32FC1 1 x D (encoder_node; header = its colour frame's)
    /odom                       nav_msgs/Odometry (pose in the odometry frame)
    /memnav/goal_embedding      sensor_msgs/Image 32FC1 1 x D                    (reliable, transient local)
    /memnav/detections          std_msgs/String JSON objects of a frame (see Detections below)
    /initialpose                geometry_msgs/PoseWithCovarianceStamped: where the robot stands in the memory's
                                frame (`frame_id`; RViz's "2D Pose Estimate"); the memory is localised there,
                                with the covariance's position and yaw spread (see Relocalisation below)
Publishes:
    /memnav/memory_event        std_msgs/String JSON per insert {stamp_ns, kind (InsertKind value: new_place,
                                updated_place or loop_closure), node_id, similarity, merged_places,
                                forgotten_places, buffer_size, objects (detections inserted with it),
                                localised (whether the memory knows where odometry lies in its frame)}
    /memnav/retrievals          std_msgs/String JSON after each insert once a goal embedding is known
                                {stamp_ns, goal_stamp_ns, robot, hits: top-k places by goal similarity with
                                memory-frame pose and pose relative to the robot}
    /memnav/scene_graph         std_msgs/String JSON snapshot (counts, localised, drift_correction, places, rooms,
                                objects, edges), at most
                                every snapshot_period_s and only after a change    (reliable, transient local)
    /memnav/scene_graph_markers visualization_msgs/MarkerArray (places as spheres coloured by room, traversability
                                edges as a line list, room labels; frame `frame_id`), at most every
                                markers_period_s and only after a change
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status every second (ERROR once its
                                memory can no longer be saved, WARN on dropped messages, else OK with the scene
                                graph's size; memnav.core.diagnostics)
Services (std_srvs/Trigger):
    ~/save    every insert is already committed in its own SQLite transaction: confirms that and reports
              the counts, JSON {db_path, places, objects, rooms, committed, localised, held_back_places,
              held_back_objects[, note]}. Fails, saying so, when db_path is empty (a RAM-only memory cannot be
              saved), after a failed write (a full disk: from then on the memory goes on in RAM only), and while
              places or objects are held back: stored while the memory is unlocalised (see Relocalisation), they
              are in the file but are forgotten at exit unless it relocalises first (the JSON counts them, `note`
              says why)
    ~/clear   forget everything: the working buffer, the long-term memory with its database file, and the
              embeddings and detections still waiting to be inserted
    ~/query   message = JSON of the top-k places for the latest goal embedding (fails, saying so, before one)
    ~/relocalise  the robot was moved (carried, odometry reset): forget where it is in the memory's frame;
              loop closures that agree with each other localise it again (SceneGraphMemory.relocalise); an empty
              memory has nothing to relocalise against and stays as it is
Parameters: the fields of MemoryNodeConfig, of SceneGraphConfig (db_path "" = RAM only, lost at exit; a file
is created or loaded, so the memory survives restarts) and of WorkingBufferConfig (prefix "buffer.").
Database file: the node holds an exclusive lock on db_path while it runs (flock; read-only inspection is not
blocked). It refuses to start, in one line with exit status 2 and without modifying the file, when db_path lies in
a folder that does not exist or cannot be written, is a file it cannot write, is locked by another memory node, or
is not a memory it can read (another schema version, another embedding_dim, not a memnav memory). A ~/clear that
cannot create the file again answers failure and goes on in RAM only (as after a failed write).
Time sync: an embedding is inserted with the latest odometry stamped at or before it (at most odom_max_age_s
older). An embedding newer than all odometry received waits up to odom_wait_s for odometry to catch up; with
MAX_PENDING_EMBEDDINGS waiting, the oldest one's wait ends (it is inserted, with a warning). A
re-sent embedding (same stamp as the last insert) is skipped; an older one is dropped with a warning (within a run
the memory's time never goes backwards). A run's clock may start behind the stamps stored in db_path by an earlier
run (a restarted simulator, a replayed bag, use_sim_time): its first embedding starts a new session, stored just
after them (SceneGraphMemory's stamp_offset_ns), with one warning.
Detections: /memnav/detections (std_msgs/String JSON, memnav.core.detections.detections_to_dict: stamp_ns and
objects with class_id, label, instance_id or null, position_m in the odometry frame; vision_msgs is not on PyPI)
from the simulator bridge's semantic ids or any detector; the objects whose stamp equals an embedding's are
inserted with it as object nodes of the scene graph. Detections arriving after their frame was inserted are
counted as late and not used.
Relocalisation: a memory loaded from its file starts unlocalised (unless start_localised), so do the next
observations after ~/relocalise: they are tracked in the last frame until relocalisation_confirmations
loop-closure candidates at different places agree on the robot's pose (relocalisation_radius_m of odometry's
pose at most; 0 = anywhere). A pose on /initialpose localises it at once, paired with the latest odometry at or
before its stamp (a zero stamp: the newest odometry); a pose in another frame than frame_id is dropped (no tf2).
The places and objects stored while unlocalised lie in a frame nothing ties to the memory's: they are moved into it
when it relocalises, and forgotten (with a warning naming how many) when the node exits before that.
Bad messages are dropped with a throttled warning and counted; the node never dies on one.
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from memnav.core.memory import SceneGraphConfig, WorkingBufferConfig
from memnav.ros.qos import latched_qos
from memnav.ros.shell_node import MAX_WAIT_S


@dataclass
class SceneGraphParams(SceneGraphConfig):
    """SceneGraphConfig as ROS parameters: a parameter cannot be None, so db_path "" means RAM only."""

    db_path: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.db_path and Path(self.db_path).is_dir():
            raise ValueError(f"SceneGraphParams.db_path {self.db_path!r} is a directory; give the database file's "
                             "path (e.g. memory/house.db)")

    def to_config(self) -> SceneGraphConfig:
        values = {f.name: getattr(self, f.name) for f in fields(SceneGraphConfig)}
        return SceneGraphConfig(**dict(values, db_path=self.db_path or None))


@dataclass
class MemoryNodeConfig:
    """Publishing and time sync.

    Attributes:
        frame_id: frame of the markers (the memory frame: odometry corrected at loop closures).
        markers_period_s: shortest interval between marker arrays (0 = never publish markers), seconds.
        snapshot_period_s: shortest interval between JSON snapshots (0 = never), seconds.
        snapshot_max_places: above this many places the snapshot lists counts only (0 = no limit).
        retrieval_k: places per retrieval list (/memnav/retrievals and ~/query).
        odom_queue_size: odometry messages kept for pairing by stamp.
        odom_wait_s: how long an embedding newer than all odometry waits for odometry, seconds (wall clock).
        odom_max_age_s: the odometry used may be at most this much older than the embedding, seconds.
    """

    frame_id: str = "odom"
    markers_period_s: float = 1.0
    snapshot_period_s: float = 1.0
    snapshot_max_places: int = 2000
    retrieval_k: int = 8
    odom_queue_size: int = 200
    odom_wait_s: float = 0.5
    odom_max_age_s: float = 0.5

    def __post_init__(self) -> None:
        for name, least in (("retrieval_k", 1), ("odom_queue_size", 1), ("snapshot_max_places", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"MemoryNodeConfig.{name} must be >= {least}, got {getattr(self, name)!r}")
        for name in ("markers_period_s", "snapshot_period_s", "odom_wait_s", "odom_max_age_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_WAIT_S):   # ROS timers count int64 nanoseconds
                raise ValueError(f"MemoryNodeConfig.{name} must be a number of seconds >= 0 and at most "
                                 f"{MAX_WAIT_S:g}, got {value!r}")
        if not self.frame_id:
            raise ValueError("MemoryNodeConfig.frame_id must name the markers' frame (the memory frame), got ''")


# (prefix, dataclass) of every parameter group this node declares, in declaration order
MAX_PENDING_EMBEDDINGS = 10   # embeddings waiting for odometry of their instants; the oldest is inserted beyond
PARAMETER_GROUPS = (("", MemoryNodeConfig), ("", SceneGraphParams), ("buffer.", WorkingBufferConfig))


def claim_database(db_path: str) -> int:
    """Open `db_path` for writing (created empty when absent) and lock it exclusively (flock, non-blocking) for
    as long as the returned descriptor stays open: two memory nodes writing one file would clash on its node ids,
    and the second would go on in RAM only from its first insert. Readers (SQLite's own locks) are not affected.

    Raises:
        ValueError: naming parameter 'db_path' and why it cannot be used (no such folder, not writable, locked
            by another memory node); the file is not modified.
    """
    path = Path(db_path)
    folder = path.parent
    what = f"parameter 'db_path' {db_path}"
    if not folder.is_dir():
        raise ValueError(f"{what}: the folder {str(folder)!r} does not exist; create it first")
    # SQLite writes its -wal and -shm files beside the database, and ~/clear deletes and re-creates it
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what}: the folder {str(folder)!r} is not writable (the database keeps its -wal and "
                         "-shm files beside it)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise ValueError(f"{what}: cannot be opened for writing ({err.strerror}); a read-only memory can be "
                         "inspected with `memnav memory`, not run") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise ValueError(f"{what}: in use by another memory node (locked); give each memory node its own "
                             "file, or stop the other one") from None
        raise ValueError(f"{what}: cannot be locked ({err.strerror})") from None
    return fd


def main(argv: list[str] | None = None) -> int:
    from memnav.ros.stack_node import run_nodes

    return run_nodes([("memory_node", build)], argv)


def build(node) -> Callable[[], None]:
    """Declare this node's parameters on `node` (an rclpy Node named memory_node) and create its publishers,
    subscriptions, services and timers; nothing spins here. Returns the clean-up (closes the memory)."""
    from geometry_msgs.msg import PoseWithCovarianceStamped
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from visualization_msgs.msg import MarkerArray

    from memnav.core.detections import detections_from_dict
    from memnav.core.diagnostics import memory_diagnostic
    from memnav.core.memory import InvalidInputError, MemoryStoreError, SceneGraphMemory, WorkingBuffer
    from memnav.core.stamp_sync import StampedQueue
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs
    from memnav.ros.embedding_msgs import image_to_embedding, stamp_to_ns
    from memnav.ros.params import declare_dataclass
    from memnav.ros.scene_graph_msgs import retrievals_body, scene_graph_markers, scene_graph_snapshot

    cfg = declare_dataclass(node, MemoryNodeConfig)
    graph_cfg = declare_dataclass(node, SceneGraphParams).to_config()
    buffer_cfg = declare_dataclass(node, WorkingBufferConfig, prefix="buffer.")
    if buffer_cfg.embedding_dim != graph_cfg.embedding_dim:
        raise ValueError(f"buffer.embedding_dim {buffer_cfg.embedding_dim} differs from embedding_dim "
                         f"{graph_cfg.embedding_dim}: both must be the encoder's embedding length")
    lock = {"fd": claim_database(graph_cfg.db_path) if graph_cfg.db_path is not None else None}

    def release() -> None:
        if lock["fd"] is not None:
            os.close(lock["fd"])   # closing the descriptor releases the flock
            lock["fd"] = None

    try:
        memory = SceneGraphMemory.from_config(graph_cfg)
    except MemoryStoreError as err:   # another schema version, another embedding_dim, not a memory: untouched
        release()
        raise ValueError(f"parameter 'db_path' {err}") from None
    except BaseException:
        release()
        raise
    # stored_ns: the last stamp the file held when this run opened it (a new session's clock may start behind it)
    st = {"memory": memory, "goal": None, "pose": None, "last_ns": None, "stored_ns": memory.stats().last_stamp_ns,
          "clock_warned": False,
          "dropped": 0, "duplicates": 0, "late_detections": 0, "markers_dirty": True, "snapshot_dirty": True}
    buffer = WorkingBuffer.from_config(buffer_cfg)
    opened = f"memory {graph_cfg.db_path or 'in RAM only'}: {memory.stats().places} places"
    if not memory.localised:
        opened += (" (unlocalised until loop closures agree with its places or /initialpose comes: the places stored "
                   "before that are forgotten if the node exits first)")
    node.get_logger().info(opened)
    latched = latched_qos()
    pub_event = node.create_publisher(String, "memnav/memory_event", 50)
    pub_retrievals = node.create_publisher(String, "memnav/retrievals", 10)
    pub_snapshot = node.create_publisher(String, "memnav/scene_graph", latched)
    pub_markers = node.create_publisher(MarkerArray, "memnav/scene_graph_markers", 1)
    odoms: StampedQueue = StampedQueue(cfg.odom_queue_size)
    pending: list[tuple[int, float, object]] = []   # (stamp_ns, wall arrival, embedding) awaiting odometry
    max_age_ns = int(cfg.odom_max_age_s * 1e9)

    def drop(what: str, err: Exception, throttle: bool = True) -> None:
        st["dropped"] += 1
        message = f"dropped {what} ({st['dropped']} so far): {err}"
        if throttle:   # rclpy fixes a call site's filters at its first call: two call sites
            node.get_logger().warning(message, throttle_duration_sec=2.0)
        else:
            node.get_logger().warning(message)

    def query(stamp_ns: int | None) -> str:
        goal_ns, goal = st["goal"]
        return json.dumps(retrievals_body(st["memory"], goal, cfg.retrieval_k, st["pose"], stamp_ns, goal_ns))

    def insert(stamp_ns: int, emb) -> None:
        match = odoms.at_or_before(stamp_ns)
        if match is None or stamp_ns - match[0] > max_age_ns:
            drop("embedding", RuntimeError(f"no odometry within odom_max_age_s {cfg.odom_max_age_s} s at or "
                                           f"before stamp {stamp_ns} ns"))
            return
        pose = match[1]
        try:
            objects = detections.pop(stamp_ns, ())
            for old in [t for t in detections if t < stamp_ns]:
                del detections[old]           # frames that never became embeddings
            saving = st["memory"].persist_error is None
            # a full disk: the file keeps its last commit, the memory goes on in RAM
            result = st["memory"].insert_observation(stamp_ns, pose, emb, objects=objects,
                                                     keep_in_ram_on_failure=True)
            if saving and st["memory"].persist_error is not None:
                node.get_logger().error(f"the memory is no longer saved: {st['memory'].persist_error}; it goes on "
                                        "in RAM (free the disk, then restart the node to save again)")
            buffer.add(stamp_ns, emb, pose)
        except (InvalidInputError, MemoryStoreError) as err:
            drop("embedding", err)
            return
        st.update(last_ns=stamp_ns, pose=pose, markers_dirty=True, snapshot_dirty=True)
        offset = st["memory"].stamp_offset_ns
        if offset and not st["clock_warned"]:
            st["clock_warned"] = True
            node.get_logger().warning(
                f"this run's clock starts behind the memory's: its first embedding is stamped {stamp_ns} ns, the last "
                f"stamp stored in {graph_cfg.db_path} {st['stored_ns']} ns (a restarted simulator, a replayed bag, "
                f"use_sim_time): taken as a new session, stored {offset} ns later, just after the stored stamps (no "
                "time counts between the sessions; stamps of places from earlier sessions read as before this run's)")
        event = {"stamp_ns": stamp_ns, "kind": result.kind.value, "node_id": result.node_id, "objects": len(objects),
                 "similarity": result.similarity, "merged_places": result.merged_places,
                 "forgotten_places": result.forgotten_places, "buffer_size": len(buffer),
                 "localised": st["memory"].localised}
        pub_event.publish(String(data=json.dumps(event)))
        if st["goal"] is not None:
            pub_retrievals.publish(String(data=query(stamp_ns)))

    def process() -> None:
        newest = odoms.newest_stamp_ns
        now = time.monotonic()
        while pending:
            stamp_ns, arrived, emb = pending[0]
            if (newest is None or newest < stamp_ns) and now - arrived < cfg.odom_wait_s:
                return   # odometry of that instant may still come
            pending.pop(0)
            insert(stamp_ns, emb)

    detections: dict[int, list] = {}   # stamp -> ObjectDetections not yet inserted (most recent 64 stamps)

    def on_detections(msg: String) -> None:
        try:
            stamp_ns, objects = detections_from_dict(json.loads(msg.data))
        except (ValueError, TypeError, RecursionError) as err:
            drop("detections", err)
            return
        if st["last_ns"] is not None and stamp_ns <= st["last_ns"]:
            st["late_detections"] += 1    # re-sent, or its frame is already in the memory
            return
        detections[stamp_ns] = objects
        while len(detections) > 64:
            detections.pop(min(detections))

    def on_embedding(msg: Image) -> None:
        try:
            emb = image_to_embedding(msg, graph_cfg.embedding_dim)
        except conv.MessageError as err:
            drop("embedding", err)
            return
        t = stamp_to_ns(msg.header.stamp)
        if t == st["last_ns"] or any(p[0] == t for p in pending):
            st["duplicates"] += 1   # re-sent frame; an older stamp goes on to be refused by the memory, with a warning
            return
        pending.append((t, time.monotonic(), emb))
        pending.sort(key=lambda p: p[0])
        if len(pending) > MAX_PENDING_EMBEDDINGS:
            # embeddings come faster than odometry of their instants: the oldest one's wait ends here, and it is
            # inserted with the odometry there is (as when its odom_wait_s is over), not thrown away
            stamp_ns, arrived, oldest = pending.pop(0)
            newest = odoms.newest_stamp_ns
            odom = ("none heard yet" if newest is None
                    else f"the newest /odom is {(stamp_ns - newest) / 1e9:.3f} s older than the oldest embedding")
            node.get_logger().warning(
                f"{MAX_PENDING_EMBEDDINGS} embeddings wait for odometry of their instants ({odom}): that one is "
                f"inserted after {time.monotonic() - arrived:.2f} s of its odom_wait_s {cfg.odom_wait_s:g} s",
                throttle_duration_sec=5.0)
            insert(stamp_ns, oldest)
        process()

    def on_odom(msg: Odometry) -> None:
        try:
            odoms.push(stamp_to_ns(msg.header.stamp), conv.odometry_to_pose(msg))
        except conv.MessageError as err:
            drop("odometry", err)
            return
        process()

    def on_goal(msg: Image) -> None:
        try:
            emb = image_to_embedding(msg, graph_cfg.embedding_dim)
            buffer.set_goal(emb)
        except (conv.MessageError, InvalidInputError) as err:
            drop("goal embedding", err)
            return
        st["goal"] = (stamp_to_ns(msg.header.stamp), emb)

    def publish_markers() -> None:
        if st["markers_dirty"]:
            st["markers_dirty"] = False
            pub_markers.publish(scene_graph_markers(st["memory"], cfg.frame_id, node.get_clock().now().to_msg()))

    def publish_snapshot() -> None:
        if st["snapshot_dirty"]:
            st["snapshot_dirty"] = False
            body = dict(scene_graph_snapshot(st["memory"], cfg.snapshot_max_places), frame_id=cfg.frame_id)
            pub_snapshot.publish(String(data=json.dumps(body)))

    def srv_save(_req, resp):
        memory = st["memory"]
        stats = memory.stats()
        failed = memory.persist_error
        if graph_cfg.db_path is None or failed is not None:
            resp.success = False
            resp.message = ("db_path is empty: the memory lives in RAM only and cannot be saved; set db_path to "
                            "persist it" if failed is None else
                            f"the memory is no longer saved since a write failed ({failed}): the file holds the last "
                            "commit before it; the rest lives in RAM only")
            return resp
        places, objects = memory.held_back
        body = {"db_path": graph_cfg.db_path, "places": stats.places, "objects": stats.objects, "rooms": stats.rooms,
                "committed": True, "localised": memory.localised, "held_back_places": places,
                "held_back_objects": objects}
        if places or objects:
            body["note"] = (f"the memory is unlocalised (loaded from its file, or ~/relocalise): the {places} places "
                            f"and {objects} objects stored since are in the file, but lie in an odometry frame not yet "
                            "tied to the memory's; they are kept once it relocalises (loop closures that agree with "
                            "its places, or a pose on /initialpose) and forgotten if the node exits before that")
        resp.success = not (places or objects)
        resp.message = json.dumps(body)
        return resp

    def srv_clear(_req, resp):
        st["memory"].close()
        failed = None
        if graph_cfg.db_path is not None:
            try:
                for suffix in ("", "-wal", "-shm"):
                    Path(graph_cfg.db_path + suffix).unlink(missing_ok=True)
                release()   # the lock was on the file just deleted
                lock["fd"] = claim_database(graph_cfg.db_path)
                st["memory"] = SceneGraphMemory.from_config(graph_cfg)
            except (OSError, ValueError, MemoryStoreError) as err:   # the folder gone, the disk full, ...
                release()
                failed = str(err)
        if failed is not None:
            st["memory"] = SceneGraphMemory.from_config(replace(graph_cfg, db_path=None))
            st["memory"].persist_error = f"~/clear could not create the database again: {failed}"
            node.get_logger().error(f"the memory is no longer saved: {st['memory'].persist_error}; it goes on "
                                    "in RAM (restart the node to save again)")
        elif graph_cfg.db_path is None:
            st["memory"] = SceneGraphMemory.from_config(graph_cfg)
        buffer.clear()
        if st["goal"] is not None:
            buffer.set_goal(st["goal"][1])
        # what was heard before the clear belongs to the memory forgotten: embeddings still waiting for odometry
        # went into the new memory at the old odometry, and the old last stamp and pose answered ~/query
        pending.clear()
        detections.clear()
        st.update(last_ns=None, pose=None, stored_ns=None, markers_dirty=True, snapshot_dirty=True)
        publish_snapshot()
        resp.success = failed is None
        resp.message = (f"memory cleared ({graph_cfg.db_path or 'RAM only'})" if failed is None else
                        f"memory cleared, but in RAM only: {st['memory'].persist_error}")
        return resp

    def on_initialpose(msg: PoseWithCovarianceStamped) -> None:
        frame = msg.header.frame_id
        if frame and frame != cfg.frame_id:
            drop("initial pose", ValueError(f"frame_id {frame!r} is not the memory's frame {cfg.frame_id!r} "
                                            "(no tf2 here: give the pose in frame_id)"), throttle=False)
            return
        stamp_ns, newest = stamp_to_ns(msg.header.stamp), odoms.newest_stamp_ns
        match = None if newest is None else odoms.at_or_before(stamp_ns if stamp_ns > 0 else newest)
        if match is None:
            drop("initial pose", RuntimeError(f"no odometry at or before stamp {stamp_ns} ns to pair it with"),
                 throttle=False)
            return
        try:
            pose, position_std, yaw_std = conv.pose_estimate_to_pose(msg)
            st["memory"].set_pose(match[1], pose, position_std_m=position_std, yaw_std_deg=yaw_std)
        except (conv.MessageError, InvalidInputError) as err:
            drop("initial pose", err, throttle=False)   # an operator's rare message: every refusal is logged
            return
        st.update(markers_dirty=True, snapshot_dirty=True)   # places stored meanwhile may have moved
        node.get_logger().info(f"localised at ({pose.x_m:.2f}, {pose.y_m:.2f}, {pose.yaw_rad:.2f} rad) in "
                               f"{cfg.frame_id} from /initialpose")

    def srv_relocalise(_req, resp):
        if not any(st["memory"].sizes()):
            # nothing to relocalise against: the places stored next would wait for loop closures with places that
            # do not exist, never localise, and be forgotten when the node closes (a clean exit lost the run)
            resp.success = True
            resp.message = json.dumps({"localised": st["memory"].localised, "places": 0,
                                       "note": "the memory is empty: nothing to relocalise against; its frame "
                                               "starts from the next observation"})
            node.get_logger().info(f"not relocalising: {resp.message}")
            return resp
        st["memory"].relocalise()
        st.update(markers_dirty=True, snapshot_dirty=True)
        resp.success = True
        resp.message = json.dumps({"localised": False, "within_m": graph_cfg.relocalisation_radius_m or None,
                                   "confirmations": graph_cfg.relocalisation_confirmations})
        node.get_logger().info(f"relocalising: {resp.message}")
        return resp

    def srv_query(_req, resp):
        if st["goal"] is None:
            resp.success, resp.message = False, "no goal embedding received on /memnav/goal_embedding yet"
        else:
            resp.success, resp.message = True, query(st["last_ns"])
        return resp

    node.create_subscription(Image, "memnav/embedding", on_embedding, 10)
    # best effort: matches reliable and best-effort odometry publishers alike (robot drivers use both)
    node.create_subscription(Odometry, "odom", on_odom,
                             QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
    node.create_subscription(Image, "memnav/goal_embedding", on_goal, latched)
    node.create_subscription(String, "memnav/detections", on_detections, 50)
    node.create_service(Trigger, "~/save", srv_save)
    node.create_service(Trigger, "~/clear", srv_clear)
    node.create_service(Trigger, "~/query", srv_query)
    node.create_service(Trigger, "~/relocalise", srv_relocalise)
    node.create_subscription(PoseWithCovarianceStamped, "initialpose", on_initialpose, 10)
    def health(new: int):
        memory = st["memory"]
        return memory_diagnostic(dict(zip(("places", "objects", "rooms"), memory.sizes())), memory.localised,
                                 graph_cfg.db_path, memory.persist_error, st["dropped"], new)

    diagnostics_msgs.report_every_period(node, health, lambda: st["dropped"])
    node.create_timer(max(min(cfg.odom_wait_s / 2.0, 0.1), 0.01), process)
    if cfg.markers_period_s > 0:
        node.create_timer(cfg.markers_period_s, publish_markers)
    if cfg.snapshot_period_s > 0:
        node.create_timer(cfg.snapshot_period_s, publish_snapshot)
        publish_snapshot()   # late joiners see a memory loaded from its file at once
    def close() -> None:
        memory = st["memory"]
        saving = graph_cfg.db_path is not None and memory.persist_error is None
        try:
            places, objects = memory.close()
        finally:
            release()
        if saving and (places or objects):
            node.get_logger().warning(
                f"forgot the {places} places and {objects} objects stored since the memory was loaded or relocalised: "
                "it never relocalised (no loop closures agreeing with its places, no /initialpose), so they lay in an "
                f"odometry frame nothing ties to the memory's; {graph_cfg.db_path} keeps its other "
                f"{memory.sizes()[0]} places")

    return close


if __name__ == "__main__":
    sys.exit(main())
