/*
 * json_merge_patch.h: JSON Merge Patch (RFC 7396), as the callback API's PATCH of a Session's
 * metadata applies it.
 */
#ifndef SBX_JSON_MERGE_PATCH_H
#define SBX_JSON_MERGE_PATCH_H

#include <jansson.h>

/* The result of applying patch to target (neither is changed nor stolen): a new reference, or
 * NULL when out of memory. A patch that is not an object replaces the target; in an object
 * patch, null removes a member and an object merges into the member recursively. */
json_t *json_merge_patch(json_t *target, json_t *patch);

#endif
