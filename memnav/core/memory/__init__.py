"""Robot memory: a long-term scene graph persisted in SQLite and a short-term working buffer.

    from memnav.core.memory import SceneGraphConfig, SceneGraphMemory, WorkingBuffer
"""
from memnav.core.memory.index import EmbeddingIndex, IndexMode, InvalidInputError
from memnav.core.memory.scene_graph import (
                                            ConsolidationReport,
                                            EdgeKind,
                                            InsertKind,
                                            InsertResult,
                                            Layer,
                                            LoopClosureCandidate,
                                            LoopClosureVerifier,
                                            MemoryStats,
                                            ObjectDetection,
                                            PathResult,
                                            PlaceInfo,
                                            Retrieval,
                                            SceneGraphConfig,
                                            SceneGraphMemory,
)
from memnav.core.memory.store import (
                                            SCHEMA_VERSION,
                                            CorruptStoreError,
                                            MemoryStoreError,
                                            SchemaVersionError,
)
from memnav.core.memory.working_buffer import (
                                            BufferAddResult,
                                            BufferAddStatus,
                                            BufferItem,
                                            BufferTensors,
                                            WorkingBuffer,
                                            WorkingBufferConfig,
)

__all__ = [
    "SCHEMA_VERSION", "BufferAddResult", "BufferAddStatus", "BufferItem", "BufferTensors", "ConsolidationReport",
    "CorruptStoreError", "EdgeKind", "EmbeddingIndex", "IndexMode", "InsertKind", "InsertResult",
    "InvalidInputError", "Layer", "LoopClosureCandidate", "LoopClosureVerifier", "MemoryStats",
    "MemoryStoreError", "ObjectDetection", "PathResult", "PlaceInfo", "Retrieval", "SceneGraphConfig",
    "SceneGraphMemory", "SchemaVersionError", "WorkingBuffer", "WorkingBufferConfig",
]
