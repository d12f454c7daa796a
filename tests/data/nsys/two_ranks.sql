-- Two processes on two GPUs, as torchrun + nsys (2024.5 layout, trimmed to the columns read).
-- pid 100 (GPU 0) names its main thread "MPI Rank 1", pid 200 (GPU 1) "MPI Rank 0": the
-- ranks come from NVTX, not from pid order. Both processes use correlation ids 1..3.
-- pid 300 makes one runtime call and no GPU work: its row is dropped and counted, and so is
-- a memset with no globalPid (two processes: it cannot be told whose it is).
-- globalPid = (1 << 48) + (pid << 24); globalTid = globalPid + tid.
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES
  (1, 'void gemm_kernel<(int)128>(float *, int)'), (2, 'gemm_kernel'),
  (3, 'cudaLaunchKernel_v7000'), (4, 'cudaMemcpyAsync_v3020'),
  (5, 'cudaStreamSynchronize_v3020'), (6, 'cudaMemsetAsync_v3020'),
  (7, 'cudaDeviceSynchronize_v3020'), (8, 'nccl:all_reduce'), (9, 'MPI Rank 1'),
  (10, 'MPI Rank 0'), (11, 'other_kernel(int)'), (12, 'other_kernel'),
  (13, 'cudaGetDeviceCount_v3020'), (14, 'cudaStreamGetCaptureInfo_v2_v11030');
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_NAME', 'NVIDIA Nsight Systems'),
  ('EXPORT_PRODUCT_VERSION', '2024.5.1.113'), ('EXPORT_SCHEMA_VERSION', '3.13.2');
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '2023-11-14T22:13:20', '');
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, busLocation TEXT,
  totalMemory INTEGER, smCount INTEGER, cuDevice INTEGER, computeMajor INTEGER,
  computeMinor INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES
  (0, 0, 'NVIDIA H100 80GB HBM3', '0000:01:00.0', 85017493504, 132, 0, 9, 0),
  (0, 1, 'NVIDIA A100-SXM4-80GB', '0000:02:00.0', 84990623744, 108, 1, 8, 0);
CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER NOT NULL, pid INTEGER NOT NULL);
INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 0, 100), (1, 1, 200);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
INSERT INTO PROCESSES VALUES ((1 << 48) + (100 << 24), 100, 'python3'),
  ((1 << 48) + (200 << 24), 200, 'python3'), ((1 << 48) + (300 << 24), 300, 'torchrun');
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
INSERT INTO ThreadNames VALUES (9, 0, (1 << 48) + (100 << 24) + 100),
  (10, 0, (1 << 48) + (200 << 24) + 200);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
  registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
  dynamicSharedMemory INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (1000, 2000, 0, 1, NULL, 7, 1, (1 << 48) + (100 << 24), 1, 2, NULL, 32, 4, 1, 1, 128, 1, 1, 512, 1024),
  (1500, 3500, 1, 1, NULL, 7, 1, (1 << 48) + (200 << 24), 11, 12, NULL, 16, 2, 2, 1, 64, 2, 1, 0, 0);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
  copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
  srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
  migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES
  (2100, 2300, 0, 1, NULL, 7, 2, (1 << 48) + (100 << 24), 4096, 1, NULL, 0, 2, NULL, NULL, 0, 1, NULL, NULL, NULL, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
  bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES
  (3600, 3700, 1, 1, NULL, 7, 2, (1 << 48) + (200 << 24), 0, 256, NULL, 2),
  (3710, 3720, 1, 1, NULL, 7, 9, NULL, 0, 8, NULL, 2);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL,
  eventId INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES
  (2300, 2400, 0, 1, NULL, 7, 3, (1 << 48) + (100 << 24), 3, 4294967295),
  (3700, 3800, 1, 1, NULL, 4294967295, 3, (1 << 48) + (200 << 24), 4, 4294967295);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL, callchainId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (900, 950, 1, (1 << 48) + (100 << 24) + 101, 1, 3, 0, NULL),
  (960, 990, 1, (1 << 48) + (100 << 24) + 101, 2, 4, 0, NULL),
  (1000, 2400, 1, (1 << 48) + (100 << 24) + 101, 3, 5, 0, NULL),
  (1400, 1450, 1, (1 << 48) + (200 << 24) + 201, 1, 3, 0, NULL),
  (1460, 1490, 1, (1 << 48) + (200 << 24) + 201, 2, 6, 0, NULL),
  (1500, 3800, 1, (1 << 48) + (200 << 24) + 201, 3, 7, 0, NULL),
  (1510, 1520, 1, (1 << 48) + (200 << 24) + 201, 4, 14, 0, NULL),
  (500, 600, 1, (1 << 48) + (300 << 24) + 300, 1, 13, 0, NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
  int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
  floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, textId, domainId) VALUES
  (10, NULL, 75, 'NCCL', (1 << 48) + (100 << 24) + 100, NULL, NULL, 1),
  (800, 2500, 59, 'step_0', (1 << 48) + (100 << 24) + 100, NULL, NULL, 0),
  (1100, 1900, 59, NULL, (1 << 48) + (100 << 24) + 100, NULL, 8, 1),
  (1300, 3900, 60, 'step_0', (1 << 48) + (200 << 24) + 200, (1 << 48) + (200 << 24) + 201, NULL, 0),
  (1350, NULL, 34, 'checkpoint, "saved"', (1 << 48) + (200 << 24) + 200, NULL, NULL, 0),
  (1360, NULL, 59, 'never closed', (1 << 48) + (200 << 24) + 200, NULL, NULL, 0),
  (1370, 1380, 59, 'it''s, "quoted"', (1 << 48) + (200 << 24) + 200, NULL, NULL, 0),
  (20, NULL, 39, 'MPI Rank 1', (1 << 48) + (100 << 24) + 100, NULL, NULL, 0);
