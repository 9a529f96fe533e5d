/*
 * log.h: structured logging, one JSON object per line on stderr:
 *   {"ts":"...","level":"info","component":"worker","requestId":"...","msg":"..."}
 * The request id follows a message from the gateway through the worker to its Sandbox.
 */
#ifndef SBX_LOG_H
#define SBX_LOG_H

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

/* component: "gateway", "worker", ...; level: "debug", "info", "warn" or "error". */
void log_init(const char *component, const char *level);
void log_emit(enum log_level lvl, const char *request_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(...) log_emit(LOG_LEVEL_DEBUG, NULL, __VA_ARGS__)
#define log_info(...) log_emit(LOG_LEVEL_INFO, NULL, __VA_ARGS__)
#define log_warn(...) log_emit(LOG_LEVEL_WARN, NULL, __VA_ARGS__)
#define log_error(...) log_emit(LOG_LEVEL_ERROR, NULL, __VA_ARGS__)

#endif
