// The SsdTable types whose kernels ssd/ compiles (ssd/kernels_<isa>.cc):
// float and bfloat16 storage, each specialised feature size and kDynamic.
// Their out-of-line members are instantiated once, in ssd/ssd_table.cc
// (compiled without -m flags), and declared extern in ssd_table.h, so no ISA
// translation unit emits a copy the linker could pick for another path.
#ifndef CEMB_SSD_INTERNAL_TABLE_TYPES_H_
#define CEMB_SSD_INTERNAL_TABLE_TYPES_H_

#define CEMB_FOR_EACH_SSD_TABLE_OF(X, T)                                      \
  X(::cemb::SsdTable<T, ::cemb::kDynamic>)                                    \
  X(::cemb::SsdTable<T, 16>) X(::cemb::SsdTable<T, 32>)                       \
  X(::cemb::SsdTable<T, 64>) X(::cemb::SsdTable<T, 128>)                      \
  X(::cemb::SsdTable<T, 256>)

#define CEMB_FOR_EACH_SSD_TABLE(X)            \
  CEMB_FOR_EACH_SSD_TABLE_OF(X, float)        \
  CEMB_FOR_EACH_SSD_TABLE_OF(X, ::cemb::bfloat16)

#endif  // CEMB_SSD_INTERNAL_TABLE_TYPES_H_
