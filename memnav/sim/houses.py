"""Procedural multi-room houses written in Habitat's formats (.glb + stage config + semantic annotation).

A house is a rectangle split recursively into rooms of varied size; adjacent rooms are joined by door
openings along a spanning tree of the room adjacency graph (plus an occasional extra door), so every
room is reachable. Furniture stands against walls, away from doors, leaving room centres free; small
objects stand on furniture or on the floor; pictures hang on walls. Every surface has its own tile in
one texture atlas with a procedural pattern, so rooms and objects look different from each other.
Coordinates are Habitat's: +Y up, floor at y = 0, the house spans x >= 0 and z >= 0.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memnav.sim.gltf_io import write_glb

ROOM_TYPES = ("living_room", "kitchen", "bedroom", "bathroom", "office", "hallway", "dining_room", "study")
FURNITURE = {  # class -> (width range m, depth range m, height range m)
    "bed": ((1.4, 2.0), (0.9, 1.6), (0.45, 0.6)),
    "sofa": ((1.4, 2.2), (0.7, 0.9), (0.7, 0.9)),
    "cabinet": ((0.6, 1.4), (0.4, 0.6), (0.8, 1.9)),
    "shelf": ((0.8, 1.6), (0.3, 0.45), (1.2, 2.0)),
    "desk": ((1.0, 1.6), (0.55, 0.75), (0.72, 0.78)),
    "table": ((0.8, 1.4), (0.6, 0.9), (0.72, 0.78)),
    "counter": ((1.2, 2.4), (0.55, 0.65), (0.88, 0.92)),
}
OBJECTS = {  # class -> (size range m, height range m)
    "plant": ((0.25, 0.45), (0.4, 1.1)),
    "lamp": ((0.2, 0.35), (0.4, 1.5)),
    "box": ((0.25, 0.5), (0.2, 0.45)),
    "tv": ((0.6, 1.0), (0.4, 0.6)),
    "vase": ((0.12, 0.25), (0.25, 0.45)),
    "books": ((0.2, 0.4), (0.15, 0.3)),
    "chair": ((0.4, 0.5), (0.8, 1.0)),
}


@dataclass
class HouseConfig:
    """Shape of the generated houses.

    Attributes:
        min_rooms: fewest rooms per house.
        max_rooms: most rooms per house.
        room_min_m: shortest room side, meters.
        room_max_m: longest room side before it is split further, meters.
        wall_height_m: floor-to-ceiling height, meters.
        wall_thickness_m: wall thickness, meters.
        door_width_m: door opening width, meters.
        door_height_m: door opening height, meters.
        door_clearance_m: furniture keeps at least this distance from a door, meters.
        furniture_per_room: (min, max) furniture pieces per room.
        floor_objects_per_room: (min, max) objects standing on the floor per room.
        pictures_per_room: (min, max) pictures on the walls per room.
        tile_px: size of one texture tile in the atlas, pixels.
        atlas_px: size of the texture atlas, pixels.
        texture_repeat_m: a surface repeats its texture tile every this many meters.
        extra_door_prob: probability of one door beyond the spanning tree (a loop in the layout).
    """

    min_rooms: int = 3
    max_rooms: int = 6
    room_min_m: float = 2.8
    room_max_m: float = 6.0
    wall_height_m: float = 2.6
    wall_thickness_m: float = 0.1
    door_width_m: float = 1.0
    door_height_m: float = 2.1
    door_clearance_m: float = 1.0
    furniture_per_room: tuple[int, int] = (1, 3)
    floor_objects_per_room: tuple[int, int] = (1, 2)
    pictures_per_room: tuple[int, int] = (1, 3)
    tile_px: int = 64
    atlas_px: int = 1024
    texture_repeat_m: float = 1.0
    extra_door_prob: float = 0.4

    def __post_init__(self) -> None:
        if not 1 <= self.min_rooms <= self.max_rooms:
            raise ValueError(f"HouseConfig: need 1 <= min_rooms <= max_rooms, got {self.min_rooms}, {self.max_rooms}")
        if self.room_min_m < self.door_width_m + 1.0:
            raise ValueError("HouseConfig.room_min_m must exceed door_width_m + 1 m")
        if self.atlas_px % self.tile_px:
            raise ValueError("HouseConfig.atlas_px must be a multiple of tile_px")


@dataclass
class MeshPart:
    """One named piece of the house mesh (a glTF node)."""

    name: str
    vertices: np.ndarray
    normals: np.ndarray
    uvs: np.ndarray
    faces: np.ndarray
    semantic_id: int = 0


@dataclass
class SemanticObject:
    """An annotated object: id, class, axis-aligned box (centre and size, meters) and room."""

    id: int
    class_name: str
    center: np.ndarray
    size: np.ndarray
    room_id: int


@dataclass
class Room:
    """A rectangular room; min_xz/max_xz are its inner extent on the floor, meters."""

    id: int
    room_type: str
    min_xz: np.ndarray
    max_xz: np.ndarray

    @property
    def center_xz(self) -> np.ndarray:
        return (self.min_xz + self.max_xz) / 2


@dataclass
class Door:
    """A door opening between two rooms: on the line axis=coord ('x' means the wall is x = coord)."""

    rooms: tuple[int, int]
    axis: str
    coord: float
    lo: float
    hi: float

    @property
    def center_xz(self) -> np.ndarray:
        mid = (self.lo + self.hi) / 2
        return np.array([self.coord, mid]) if self.axis == "x" else np.array([mid, self.coord])


@dataclass
class House:
    name: str
    parts: list[MeshPart]
    atlas: np.ndarray
    rooms: list[Room]
    objects: list[SemanticObject]
    doors: list[Door]
    size_xz: np.ndarray = field(default_factory=lambda: np.zeros(2))

    @property
    def num_triangles(self) -> int:
        return int(sum(len(p.faces) for p in self.parts))


# ---------------------------------------------------------------------------------------------
# textures

class _Atlas:
    def __init__(self, cfg: HouseConfig, rng: np.random.Generator) -> None:
        self.cfg = cfg
        self.rng = rng
        self.image = np.zeros((cfg.atlas_px, cfg.atlas_px, 3), dtype=np.uint8)
        self.per_row = cfg.atlas_px // cfg.tile_px
        self.count = 0

    def add(self, tile: np.ndarray) -> tuple[float, float, float, float]:
        """Store a tile; returns its (u0, v0, u1, v1) in glTF uv (origin top-left) with half-texel insets."""
        if self.count >= self.per_row ** 2:
            raise ValueError("texture atlas is full: raise HouseConfig.atlas_px")
        t = self.cfg.tile_px
        r, c = divmod(self.count, self.per_row)
        self.image[r * t:(r + 1) * t, c * t:(c + 1) * t] = tile
        self.count += 1
        a = float(self.cfg.atlas_px)
        return ((c * t + 0.5) / a, (r * t + 0.5) / a, ((c + 1) * t - 0.5) / a, ((r + 1) * t - 0.5) / a)


def _color(rng: np.random.Generator, lo: float = 0.15, hi: float = 0.95) -> np.ndarray:
    return rng.uniform(lo, hi, 3)


def make_texture(kind: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """A procedural texture tile (size x size x 3 uint8) of the given family."""
    y, x = np.mgrid[0:size, 0:size] / size
    a, b = _color(rng), _color(rng)
    noise = rng.normal(0.0, 1.0, (size, size))
    if kind == "wood":
        planks = int(rng.integers(3, 7))
        idx = np.floor(y * planks)
        shade = 0.75 + 0.25 * np.sin(idx * 12.9898 + rng.uniform(0, 6)) ** 2
        grain = 0.06 * np.sin(x * rng.uniform(20, 60) + noise * 0.3)
        img = a[None, None] * (shade + grain)[..., None]
        img[(y * planks) % 1 < 0.04] *= 0.5
    elif kind == "tiles":
        n = int(rng.choice([2, 4, 8]))
        checker = ((np.floor(x * n) + np.floor(y * n)) % 2)[..., None]
        img = a * checker + b * (1 - checker)
        grout = ((x * n) % 1 < 0.05) | ((y * n) % 1 < 0.05)
        img[grout] = 0.85
    elif kind == "carpet":
        img = a[None, None] * (0.85 + 0.12 * noise[..., None])
    elif kind == "stripes":
        n = int(rng.integers(2, 9))
        phase = (x if rng.random() < 0.7 else y) * n
        m = (phase % 1 < rng.uniform(0.3, 0.7))[..., None]
        img = a * m + b * (1 - m)
    elif kind == "dots":
        n = int(rng.integers(3, 7))
        d = np.hypot((x * n) % 1 - 0.5, (y * n) % 1 - 0.5)
        m = (d < rng.uniform(0.15, 0.35))[..., None]
        img = a * m + b * (1 - m)
    elif kind == "diamonds":
        n = int(rng.integers(2, 6))
        d = np.abs((x * n) % 1 - 0.5) + np.abs((y * n) % 1 - 0.5)
        m = (d < 0.35)[..., None]
        img = a * m + b * (1 - m)
    elif kind == "bands":
        n = int(rng.integers(2, 5))
        level = np.floor(y * n) / max(n - 1, 1)
        img = a * (1 - level[..., None]) + b * level[..., None]
    elif kind == "picture":
        img = np.ones((size, size, 3)) * _color(rng, 0.6, 1.0)
        for _ in range(int(rng.integers(3, 7))):
            cx, cy, r = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(0.08, 0.35)
            col = _color(rng, 0.0, 1.0)
            if rng.random() < 0.5:
                m = np.hypot(x - cx, y - cy) < r
            else:
                m = (np.abs(x - cx) < r) & (np.abs(y - cy) < r * rng.uniform(0.3, 1.0))
            img[m] = col
        img[(x < 0.05) | (x > 0.95) | (y < 0.05) | (y > 0.95)] = 0.1
    else:  # "plain"
        img = a[None, None] * (0.92 + 0.05 * noise[..., None])
    return np.clip(np.asarray(img) * 255.0, 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# geometry helpers

def _quad(origin: np.ndarray, du: np.ndarray, dv: np.ndarray, rect: tuple[float, float, float, float],
          repeat_m: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A rectangle origin + s*du + t*dv (s, t in [0,1]) facing du x dv, split in ~repeat_m cells, each
    showing the whole tile (so big surfaces repeat their texture)."""
    lu, lv = float(np.linalg.norm(du)), float(np.linalg.norm(dv))
    nu, nv = max(1, round(lu / repeat_m)), max(1, round(lv / repeat_m))
    normal = np.cross(du, dv)
    normal = normal / np.linalg.norm(normal)
    u0, v0, u1, v1 = rect
    verts, uvs, faces = [], [], []
    for i in range(nu):
        for j in range(nv):
            base = len(verts)
            for si, ti in ((i, j), (i + 1, j), (i + 1, j + 1), (i, j + 1)):
                verts.append(origin + du * (si / nu) + dv * (ti / nv))
            uvs += [(u0, v1), (u1, v1), (u1, v0), (u0, v0)]
            faces += [(base, base + 1, base + 2), (base, base + 2, base + 3)]
    verts_a = np.asarray(verts, dtype=np.float32)
    return verts_a, np.tile(normal.astype(np.float32), (len(verts_a), 1)), np.asarray(uvs, np.float32), \
        np.asarray(faces, np.uint32)


def _merge(pieces: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    vs, ns, us, fs, off = [], [], [], [], 0
    for v, n, u, f in pieces:
        vs.append(v)
        ns.append(n)
        us.append(u)
        fs.append(f + off)
        off += len(v)
    return np.concatenate(vs), np.concatenate(ns), np.concatenate(us), np.concatenate(fs).astype(np.uint32)


def _box(lo, hi, rect, repeat_m: float, faces: str = "xXyYzZ") -> tuple:
    """A closed axis-aligned box with outward faces (counter-clockwise seen from outside)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x0, y0, z0 = lo
    x1, y1, z1 = hi
    ex, ey, ez = np.array([x1 - x0, 0, 0]), np.array([0, y1 - y0, 0]), np.array([0, 0, z1 - z0])
    spec = {  # origin, du, dv with du x dv pointing outward
        "x": (np.array([x0, y0, z0]), ez, ey),     # z cross y = -x
        "X": (np.array([x1, y0, z1]), -ez, ey),    # -z cross y = +x
        "y": (np.array([x0, y0, z0]), ex, ez),     # x cross z = -y
        "Y": (np.array([x0, y1, z1]), ex, -ez),    # x cross -z = +y
        "z": (np.array([x1, y0, z0]), -ex, ey),    # -x cross y = -z
        "Z": (np.array([x0, y0, z1]), ex, ey),     # x cross y = +z
    }
    return _merge([_quad(*spec[k], rect, repeat_m) for k in faces])


# ---------------------------------------------------------------------------------------------
# layout

def _split_rooms(cfg: HouseConfig, rng: np.random.Generator) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    n_rooms = int(rng.integers(cfg.min_rooms, cfg.max_rooms + 1))
    width = rng.uniform(max(cfg.room_min_m * 2, 7.0), min(cfg.room_max_m * 2.6, 15.0))
    depth = rng.uniform(max(cfg.room_min_m * 1.5, 6.0), min(cfg.room_max_m * 2.2, 12.0))
    rects = [(np.array([0.0, 0.0]), np.array([width, depth]))]
    for _ in range(200):
        small_enough = all(np.all(hi - lo <= cfg.room_max_m) for lo, hi in rects)
        if len(rects) >= cfg.max_rooms or (len(rects) >= n_rooms and small_enough):
            break
        # split the largest splittable rectangle along its longer side
        order = sorted(range(len(rects)), key=lambda i: -np.prod(rects[i][1] - rects[i][0]))
        done = False
        for i in order:
            lo, hi = rects[i]
            size = hi - lo
            axis = int(np.argmax(size)) if rng.random() < 0.85 else int(np.argmin(size))
            if size[axis] < 2 * cfg.room_min_m:
                axis = 1 - axis
                if size[axis] < 2 * cfg.room_min_m:
                    continue
            cut = lo[axis] + rng.uniform(cfg.room_min_m, size[axis] - cfg.room_min_m)
            a_hi, b_lo = hi.copy(), lo.copy()
            a_hi[axis] = cut
            b_lo[axis] = cut
            rects[i] = (lo, a_hi)
            rects.append((b_lo, hi))
            done = True
            break
        if not done:
            break
    return rects, np.array([width, depth])


def _shared_edge(a: tuple, b: tuple, min_len: float) -> tuple[str, float, float, float] | None:
    (alo, ahi), (blo, bhi) = a, b
    for axis, name in ((0, "x"), (1, "z")):
        other = 1 - axis
        for c in (ahi[axis],) if abs(ahi[axis] - blo[axis]) < 1e-6 else ():
            lo, hi = max(alo[other], blo[other]), min(ahi[other], bhi[other])
            if hi - lo >= min_len:
                return name, float(c), float(lo), float(hi)
        for c in (bhi[axis],) if abs(bhi[axis] - alo[axis]) < 1e-6 else ():
            lo, hi = max(alo[other], blo[other]), min(ahi[other], bhi[other])
            if hi - lo >= min_len:
                return name, float(c), float(lo), float(hi)
    return None


def _plan_doors(rects: list, cfg: HouseConfig, rng: np.random.Generator) -> list[Door]:
    n = len(rects)
    edges = []
    for i in range(n):
        for j in range(i + 1, n):
            e = _shared_edge(rects[i], rects[j], cfg.door_width_m + 0.8)
            if e is not None:
                edges.append((i, j, e))
    rng.shuffle(edges)
    parent = list(range(n))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    chosen, spare = [], []
    for i, j, e in edges:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
            chosen.append((i, j, e))
        else:
            spare.append((i, j, e))
    if spare and rng.random() < cfg.extra_door_prob:
        chosen.append(spare[0])
    doors = []
    for i, j, (axis, coord, lo, hi) in chosen:
        margin = 0.4
        start = rng.uniform(lo + margin, hi - margin - cfg.door_width_m)
        doors.append(Door((i, j), axis, coord, float(start), float(start + cfg.door_width_m)))
    return doors


def _wall_lines(rects: list) -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Union of room edges per wall line."""
    lines: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for lo, hi in rects:
        for axis, coord, a, b in (("x", lo[0], lo[1], hi[1]), ("x", hi[0], lo[1], hi[1]),
                                  ("z", lo[1], lo[0], hi[0]), ("z", hi[1], lo[0], hi[0])):
            key = (axis, round(float(coord), 6))
            lines.setdefault(key, []).append((float(a), float(b)))
    merged = {}
    for key, segs in lines.items():
        segs.sort()
        out = [list(segs[0])]
        for a, b in segs[1:]:
            if a <= out[-1][1] + 1e-6:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        merged[key] = [(a, b) for a, b in out]
    return merged


# ---------------------------------------------------------------------------------------------

def generate_house(seed: int, cfg: HouseConfig | None = None, name: str = "house_000") -> House:
    """Generate one house deterministically from `seed`."""
    cfg = cfg or HouseConfig()
    rng = np.random.default_rng(seed)
    atlas = _Atlas(cfg, rng)
    rects, size = _split_rooms(cfg, rng)
    doors = _plan_doors(rects, cfg, rng)
    types = list(rng.permutation(ROOM_TYPES))
    rooms = [Room(i, str(types[i % len(types)]), lo.copy(), hi.copy()) for i, (lo, hi) in enumerate(rects)]
    t, h, rep = cfg.wall_thickness_m, cfg.wall_height_m, cfg.texture_repeat_m
    parts: list[MeshPart] = []

    def add(name_: str, geom: tuple, sem: int = 0) -> None:
        v, n, u, f = geom
        parts.append(MeshPart(name_, v, n, u, f, sem))

    ceiling_tile = atlas.add(make_texture("plain", rng, cfg.tile_px) // 2 + 120)
    wall_tiles = {}
    for room in rooms:
        lo, hi = room.min_xz, room.max_xz
        floor_tile = atlas.add(make_texture(str(rng.choice(["wood", "tiles", "carpet"])), rng, cfg.tile_px))
        wall_tiles[room.id] = atlas.add(make_texture(str(rng.choice(["stripes", "dots", "diamonds", "bands", "plain"])),
                                                     rng, cfg.tile_px))
        # floor (facing up) and ceiling (facing down), one quad grid each
        add(f"floor_r{room.id}", _quad(np.array([lo[0], 0.0, hi[1]]), np.array([hi[0] - lo[0], 0, 0]),
                                       np.array([0, 0, lo[1] - hi[1]]), floor_tile, rep))
        add(f"ceiling_r{room.id}", _quad(np.array([lo[0], h, lo[1]]), np.array([hi[0] - lo[0], 0, 0]),
                                         np.array([0, 0, hi[1] - lo[1]]), ceiling_tile, rep))

    # walls: each wall line minus door openings, lintels above doors
    k = 0
    for (axis, coord), segs in sorted(_wall_lines(rects).items()):
        line_doors = [d for d in doors if d.axis == axis and abs(d.coord - coord) < 1e-6]
        tile = wall_tiles[_room_at_line(rooms, axis, coord)]
        for a, b in segs:
            cuts = sorted((d.lo, d.hi) for d in line_doors if d.lo >= a - 1e-6 and d.hi <= b + 1e-6)
            pieces, cursor = [], a - t / 2
            for d0, d1 in cuts:
                pieces.append((cursor, d0, 0.0, h))
                pieces.append((d0, d1, cfg.door_height_m, h))
                cursor = d1
            pieces.append((cursor, b + t / 2, 0.0, h))
            for p0, p1, y0, y1 in pieces:
                if p1 - p0 < 1e-3:
                    continue
                if axis == "x":
                    lo3, hi3 = (coord - t / 2, y0, p0), (coord + t / 2, y1, p1)
                else:
                    lo3, hi3 = (p0, y0, coord - t / 2), (p1, y1, coord + t / 2)
                add(f"wall_{k}", _box(lo3, hi3, tile, rep))
                k += 1

    objects: list[SemanticObject] = []
    next_id = [1]

    def add_object(cls: str, lo3, hi3, room: Room, kind: str | None = None) -> None:
        oid = next_id[0]
        next_id[0] += 1
        tile = atlas.add(make_texture(kind or str(rng.choice(["plain", "stripes", "dots", "bands", "wood"])),
                                      rng, cfg.tile_px))
        lo3, hi3 = np.asarray(lo3, float), np.asarray(hi3, float)
        if cls in ("table", "desk"):
            top = _box([lo3[0], hi3[1] - 0.05, lo3[2]], hi3, tile, rep)
            legs = [top]
            for lx, lz in ((lo3[0], lo3[2]), (hi3[0] - 0.06, lo3[2]), (lo3[0], hi3[2] - 0.06),
                           (hi3[0] - 0.06, hi3[2] - 0.06)):
                legs.append(_box([lx, 0.0, lz], [lx + 0.06, hi3[1] - 0.05, lz + 0.06], tile, rep))
            geom = _merge(legs)
        else:
            geom = _box(lo3, hi3, tile, rep)
        add(f"obj_{oid:04d}_{cls}", geom, oid)
        objects.append(SemanticObject(oid, cls, (lo3 + hi3) / 2, hi3 - lo3, room.id))

    for room in rooms:
        placed: list[tuple[np.ndarray, np.ndarray]] = []
        room_doors = [d for d in doors if room.id in d.rooms]
        inner_lo = room.min_xz + t / 2 + 0.02
        inner_hi = room.max_xz - t / 2 - 0.02
        extent = inner_hi - inner_lo
        n_furn = int(rng.integers(cfg.furniture_per_room[0], cfg.furniture_per_room[1] + 1))
        for _ in range(n_furn):
            cls = str(rng.choice(list(FURNITURE)))
            (w0, w1), (d0, d1), (h0, h1) = FURNITURE[cls]
            box = _place_against_wall(rng, inner_lo, inner_hi, rng.uniform(w0, w1),
                                      min(rng.uniform(d0, d1), 0.25 * extent.min()), room_doors, placed, cfg)
            if box is None:
                continue
            lo2, hi2 = box
            height = rng.uniform(h0, h1)
            placed.append(box)
            add_object(cls, [lo2[0], 0.0, lo2[1]], [hi2[0], height, hi2[1]], room)
            # something on top of it
            if cls in ("table", "desk", "cabinet", "counter") and rng.random() < 0.8:
                ocls = str(rng.choice(["vase", "books", "box", "lamp", "tv", "plant"]))
                (s0, s1), (oh0, oh1) = OBJECTS[ocls]
                s = min(rng.uniform(s0, s1), 0.8 * float((hi2 - lo2).min()))
                c = lo2 + (hi2 - lo2) * rng.uniform(0.3, 0.7, 2)
                add_object(ocls, [c[0] - s / 2, height, c[1] - s / 2],
                           [c[0] + s / 2, height + rng.uniform(oh0, oh1), c[1] + s / 2], room)
        n_obj = int(rng.integers(cfg.floor_objects_per_room[0], cfg.floor_objects_per_room[1] + 1))
        for _ in range(n_obj):
            cls = str(rng.choice(["plant", "lamp", "box", "chair"]))
            (s0, s1), (oh0, oh1) = OBJECTS[cls]
            s = rng.uniform(s0, s1)
            box = _place_against_wall(rng, inner_lo, inner_hi, s, s, room_doors, placed, cfg)
            if box is None:
                continue
            placed.append(box)
            add_object(cls, [box[0][0], 0.0, box[0][1]], [box[1][0], rng.uniform(oh0, oh1), box[1][1]], room)
        n_pic = int(rng.integers(cfg.pictures_per_room[0], cfg.pictures_per_room[1] + 1))
        for _ in range(n_pic):
            _add_picture(rng, room, room_doors, cfg, add_object)
    house = House(name, parts, atlas.image, rooms, objects, doors, size)
    return house


def _room_at_line(rooms: list[Room], axis: str, coord: float) -> int:
    for room in rooms:
        i = 0 if axis == "x" else 1
        if abs(room.min_xz[i] - coord) < 1e-6 or abs(room.max_xz[i] - coord) < 1e-6:
            return room.id
    return rooms[0].id


def _door_dist(lo2: np.ndarray, hi2: np.ndarray, door: Door) -> float:
    c = door.center_xz
    d = np.maximum(np.maximum(lo2 - c, c - hi2), 0.0)
    return float(np.hypot(*d))


def _place_against_wall(rng, inner_lo, inner_hi, width, depth, doors, placed, cfg):
    """An axis-aligned footprint against a random wall, clear of doors and other furniture."""
    for _ in range(30):
        side = int(rng.integers(4))
        w, d = float(width), float(depth)
        if side in (0, 1):   # against x = lo or x = hi walls: depth along x, width along z
            span = inner_hi[1] - inner_lo[1] - w
            if span <= 0:
                continue
            z0 = inner_lo[1] + rng.uniform(0, span)
            x0 = inner_lo[0] if side == 0 else inner_hi[0] - d
            lo2, hi2 = np.array([x0, z0]), np.array([x0 + d, z0 + w])
        else:
            span = inner_hi[0] - inner_lo[0] - w
            if span <= 0:
                continue
            x0 = inner_lo[0] + rng.uniform(0, span)
            z0 = inner_lo[1] if side == 2 else inner_hi[1] - d
            lo2, hi2 = np.array([x0, z0]), np.array([x0 + w, z0 + d])
        if any(_door_dist(lo2, hi2, door) < cfg.door_clearance_m + cfg.door_width_m / 2 for door in doors):
            continue
        if any(np.all(lo2 < phi + 0.3) and np.all(plo - 0.3 < hi2) for plo, phi in placed):
            continue
        return lo2, hi2
    return None


def _add_picture(rng, room: Room, doors: list[Door], cfg: HouseConfig, add_object) -> None:
    t = cfg.wall_thickness_m
    for _ in range(20):
        side = int(rng.integers(4))
        w = rng.uniform(0.5, 1.1)
        hgt = rng.uniform(0.4, 0.8)
        y0 = rng.uniform(1.1, 1.7)
        lo, hi = room.min_xz + t / 2, room.max_xz - t / 2
        if side in (0, 1):
            span = hi[1] - lo[1] - w - 0.4
            if span <= 0:
                continue
            z0 = lo[1] + 0.2 + rng.uniform(0, span)
            x = lo[0] if side == 0 else hi[0] - 0.03
            lo3, hi3 = [x, y0, z0], [x + 0.03, y0 + hgt, z0 + w]
        else:
            span = hi[0] - lo[0] - w - 0.4
            if span <= 0:
                continue
            x0 = lo[0] + 0.2 + rng.uniform(0, span)
            z = lo[1] if side == 2 else hi[1] - 0.03
            lo3, hi3 = [x0, y0, z], [x0 + w, y0 + hgt, z + 0.03]
        lo2, hi2 = np.array([lo3[0], lo3[2]]), np.array([hi3[0], hi3[2]])
        if any(_door_dist(lo2, hi2, d) < cfg.door_width_m for d in doors):
            continue
        add_object("picture", lo3, hi3, room, kind="picture")
        return


def write_house(house: House, out_dir: Path) -> Path:
    """Write `{name}.glb`, `{name}.stage_config.json` and `{name}.semantic.json`; returns the .glb path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    glb = out_dir / f"{house.name}.glb"
    write_glb(glb, house.parts, house.atlas)
    stage = {"render_asset": glb.name, "up": [0, 1, 0], "front": [0, 0, -1], "origin": [0, 0, 0],
             "units_to_meters": 1.0, "requires_lighting": False,
             "semantic_descriptor_filename": f"{house.name}.semantic.json"}
    (out_dir / f"{house.name}.stage_config.json").write_text(json.dumps(stage, indent=2) + "\n")
    sem = {
        "house": house.name,
        "rooms": [{"id": r.id, "room_type": r.room_type, "min": [round(float(v), 5) for v in r.min_xz],
                   "max": [round(float(v), 5) for v in r.max_xz]} for r in house.rooms],
        "doors": [{"rooms": list(d.rooms), "axis": d.axis, "coord": round(d.coord, 5),
                   "lo": round(d.lo, 5), "hi": round(d.hi, 5)} for d in house.doors],
        "objects": [{"id": o.id, "class_name": o.class_name, "center": [round(float(v), 5) for v in o.center],
                     "size": [round(float(v), 5) for v in o.size], "room_id": o.room_id} for o in house.objects],
        "classes": sorted({o.class_name for o in house.objects}),
    }
    (out_dir / f"{house.name}.semantic.json").write_text(json.dumps(sem, indent=2) + "\n")
    return glb


def read_semantic_classes(scene: Path) -> dict[int, tuple[int, str]]:
    """Semantic id -> (class id, class name) from the `{name}.semantic.json` beside a generated house's
    .glb (class id = index in its sorted "classes"); empty when there is no such file."""
    path = Path(scene).with_name(f"{Path(scene).stem}.semantic.json")
    if not path.is_file():
        return {}
    try:
        sem = json.loads(path.read_text())
        classes = {name: i for i, name in enumerate(sem["classes"])}
        return {int(o["id"]): (classes[o["class_name"]], str(o["class_name"])) for o in sem["objects"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a memnav semantic annotation ({err})") from err
