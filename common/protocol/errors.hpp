// The protocol's error codes live in the public header; see there.
#pragma once

#include "muster/error.hpp"
