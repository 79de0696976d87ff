// parallel_for and DefaultThreads moved to base/parallel.h (every library
// uses them, not only embedding/); this header stays for code that includes
// it from here.
#ifndef CEMB_EMBEDDING_PARALLEL_H_
#define CEMB_EMBEDDING_PARALLEL_H_

#include "base/parallel.h"  // IWYU pragma: export

#endif  // CEMB_EMBEDDING_PARALLEL_H_
