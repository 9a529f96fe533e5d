/*
 * json_merge_patch.c: RFC 7396 section 2's MergePatch function, on jansson values.
 */
#include "json_merge_patch.h"

json_t *json_merge_patch(json_t *target, json_t *patch)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    json_t *out = json_is_object(target) ? json_deep_copy(target) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
    {
        if (!out)
            return NULL;
        if (json_is_null(v)) {
            json_object_del(out, k);
            continue;
        }
        json_t *merged = json_merge_patch(json_object_get(out, k), v);
        if (!merged || json_object_set_new(out, k, merged) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}
