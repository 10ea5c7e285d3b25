// Internal: the run config's schema (config_schema.cpp), walked by config.cpp through the
// schema machinery of schema.h.
#pragma once
#include "engine/train/config.h"
#include "engine/train/schema.h"

namespace driftless::train {

void visit_schema(Config& config, const FieldVisitor& visitor);

}  // namespace driftless::train
