// Outboard's public C++ API in one include: the channel to an agent and its
// one-sided data path, the agent and its services, task graphs (local and
// offloaded), exact tokenizers (local and offloaded), and the utilities they
// share (Status/Result, deadlines, logging, option tables, statistics).
#pragma once

#include "outboard/affinity.h"
#include "outboard/agent.h"
#include "outboard/buffer.h"
#include "outboard/channel.h"
#include "outboard/checksum.h"
#include "outboard/clock.h"
#include "outboard/config.h"
#include "outboard/detokenize_client.h"
#include "outboard/graph.h"
#include "outboard/graph_offload.h"
#include "outboard/log.h"
#include "outboard/memory_kind.h"
#include "outboard/secure_config.h"
#include "outboard/service.h"
#include "outboard/stats.h"
#include "outboard/status.h"
#include "outboard/tokenize_client.h"
#include "outboard/tokenizer.h"
#include "outboard/version.h"
