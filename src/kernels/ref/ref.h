// Scalar reference kernels, templated on float and double: the specification of every op. Plain loops, no
// threads, no tricks. Tests compare the fast kernels against these, and Model<double> runs on them.
#pragma once
#include "kernels/ref/attention.h"
#include "kernels/ref/basic.h"
