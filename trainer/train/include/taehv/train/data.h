// The training data, all of it: clip sources (synthetic scenes, video files, frame folders), the evaluation's clips,
// the global sample order and the prefetching loader. Include the one header a file needs where it needs one.
#pragma once

#include "taehv/train/clip_source.h"
#include "taehv/train/eval_clips.h"
#include "taehv/train/loader.h"
#include "taehv/train/sample_order.h"
