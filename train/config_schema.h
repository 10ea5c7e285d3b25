// Internal: the run config's schema (config_schema.cpp), walked by config.cpp through the
// schema machinery of schema.h.
#pragma once
#include "train/config.h"
#include "train/schema.h"

namespace driftless::train {

void visit_schema(Config& config, const FieldVisitor& visitor);

}  // namespace driftless::train
