"""Nsight Systems SQLite exports: small fixtures with the real table and column names of `nsys export --type sqlite`."""

import sqlite3

import pytest
from capture_helpers import ADD, NAMES

from graphsim.importers.captures import CaptureError, LaunchClass, load_capture

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
  launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
  gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
  localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
  sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
  callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
  dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
  migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL, busLocation TEXT,
  totalMemory INTEGER, memoryBandwidth INTEGER, smCount INTEGER, uuid TEXT);
"""

TID = 281474976710657  # nsys globalTid encoding (pid << 24 | tid); opaque to the importer
PUSH_POP = 59


def make_db(path, *, runtime=True, nvtx=True, text_ids=False):
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    if not runtime:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    strings = {}

    def sid(text):
        if text not in strings:
            strings[text] = len(strings) + 1
            conn.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[text], text))
        return strings[text]

    conn.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H200', '0000:19:00.0', 150754820096, "
                 "4800000000000, 132, 'GPU-1')")
    kernels = [NAMES["rms_norm"][0], NAMES["gemm"][0], ADD, NAMES["silu_and_mul"][0]]
    corr = 1
    for it in range(2):  # two iterations of 100 µs, 1 ms apart, each with a memcpy in and 4 kernels
        t0 = 1_000_000 + it * 1_000_000
        if nvtx:
            if text_ids:
                conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES "
                             "(?, ?, ?, NULL, ?, ?)", (t0, t0 + 100_000, PUSH_POP, TID, sid("decode:4x100")))
            else:
                conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, ?, ?, ?)",
                             (t0, t0 + 100_000, PUSH_POP, "decode:4x100", TID))
            conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, NULL, 34, "
                         "'a mark', ?)", (t0 + 5, TID))
        if runtime:
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                         (t0 + 1000, t0 + 2000, TID, corr, sid("cudaMemcpyAsync_v3020")))
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
                     "correlationId, globalPid, bytes, copyKind) VALUES (?, ?, 0, 1, 7, ?, 1, 4096, 1)",
                     (t0 + 3000, t0 + 4000, corr))
        corr += 1
        for k, name in enumerate(kernels):
            launch = t0 + 10_000 + k * 10_000
            if runtime:
                conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                             (launch, launch + 3000, TID, corr, sid("cudaLaunchKernel_v7000")))
            # device start lags the launch by 95 µs: the last kernel of iteration 0 runs after its NVTX range ends
            start = launch + 95_000 if k == 3 else launch + 5_000
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
                         "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, "
                         "gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
                         "localMemoryPerThread, localMemoryTotal, gridId) VALUES "
                         "(?, ?, 0, 1, 7, ?, 1, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?)",
                         (start, start + 2500 * (k + 1), corr, sid(name), sid(name.split("<")[0][5:]), corr))
            corr += 1
    conn.commit()
    conn.close()
    return path


def test_kernels_memcpy_and_nvtx_iterations(tmp_path):
    cap = load_capture(make_db(tmp_path / "r.sqlite"))
    assert cap.format == "nsys-sqlite" and cap.device == "NVIDIA H200"
    assert [it.label for it in cap.iterations] == ["decode:4x100", "decode:4x100"]
    it = cap.iterations[0]
    assert [x.klass for x in it.launches] == [LaunchClass.PLUMBING, LaunchClass.NORM, LaunchClass.GEMM,
                                              LaunchClass.ELEMENTWISE, LaunchClass.ACT_AND_MUL]
    memcpy, norm, _gemm, add, act = it.launches
    assert memcpy.plumbing == "memcpy" and memcpy.key == "[CUDA memcpy HtoD]" and memcpy.duration_us == 1.0
    assert norm.op == "rms_norm" and norm.duration_us == 2.5 and norm.stream == "7" and norm.start_us == 1015.0
    assert add.op == "add" and act.op == "silu_and_mul"
    # the activation ran after the range closed but was launched inside it: placed by its launch
    assert act.start_us > it.end_us
    assert cap.notes == ()


def test_nvtx_text_through_string_ids(tmp_path):
    cap = load_capture(make_db(tmp_path / "r.sqlite", text_ids=True))
    assert [it.label for it in cap.iterations] == ["decode:4x100"] * 2


def test_without_runtime_table_kernels_are_placed_by_device_time(tmp_path):
    cap = load_capture(make_db(tmp_path / "r.sqlite", runtime=False))
    assert any("no CUPTI_ACTIVITY_KIND_RUNTIME" in n for n in cap.notes)
    assert any("outside every iteration range" in n for n in cap.notes)  # the late activation kernel
    assert len(cap.iterations[0].launches) == 4


def test_without_nvtx_the_capture_is_one_iteration(tmp_path):
    cap = load_capture(make_db(tmp_path / "r.sqlite", nvtx=False))
    (it,) = cap.iterations
    assert it.label == "capture" and len(it.launches) == 10


def test_unsuitable_sqlite_files(tmp_path):
    p = tmp_path / "empty.sqlite"
    sqlite3.connect(p).execute("CREATE TABLE meta (key TEXT, value TEXT)").connection.commit()
    with pytest.raises(CaptureError) as e:
        load_capture(p)
    assert "profile.db" in str(e.value) and "nsys export --type sqlite" in str(e.value) and "\n" not in str(e.value)
