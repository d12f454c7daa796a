-- The 2022 layout (nsys 2022.2, like the saxpy MPI export): the metadata table is still named
-- EXPORT_META_DATA, memcpy and runtime rows carry an extra `name` TEXT column, and nsys's MPI
-- tracing names the main thread "MPI Rank 2" through NVTX (eventType 39). One process.
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES (1, 'saxpy(int, float, float *, float *)'), (2, 'saxpy'),
  (3, 'cudaLaunchKernel_v7000'), (4, 'cudaMemcpy_v3020'), (5, 'MPI_Send');
CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_PRODUCT_VERSION', '2022.2.1.31'),
  ('EXPORT_SCHEMA_VERSION', '2.9.1');
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 6000, 0, 1, 7, 140, (1 << 48) + (77 << 24), 1, 2, NULL, 16, 4096, 1, 1, 256, 1, 1, 0, 0);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, name TEXT);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (4000, 4500, 0, 1, 7, 139, (1 << 48) + (77 << 24), 8192, 10, NULL, 2, 2, 0, 1, 1, 2, NULL, NULL, NULL, NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER, name TEXT);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (3900, 4600, 1, (1 << 48) + (77 << 24) + 77, 139, 4, 0, NULL, NULL),
  (4900, 4950, 1, (1 << 48) + (77 << 24) + 77, 140, 3, 0, NULL, NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) VALUES
  (100, NULL, 75, 'MPI', (1 << 48) + (77 << 24) + 77, NULL, 1),
  (200, NULL, 39, 'MPI Rank 2', (1 << 48) + (77 << 24) + 77, NULL, 0),
  (3000, 3500, 59, NULL, (1 << 48) + (77 << 24) + 77, 5, 1);
