-- CUDA tracing requested but nothing collected (like the lighttransport export): no kernel
-- table at all, three runtime rows, and nsys's own warning in DIAGNOSTIC_EVENT.
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES (1, 'cudaGetDeviceCount_v3020');
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.1.3.140');
CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, timestampType INTEGER, source INTEGER, severity INTEGER, text TEXT, globalPid INTEGER);
INSERT INTO DIAGNOSTIC_EVENT VALUES (0, 0, 0, 2, 'No CUDA events collected. Does the process use CUDA?', NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1, 2, 1, (1 << 48) + (9 << 24) + 9, 1, 1, 0, NULL);
