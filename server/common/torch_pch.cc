// Donor translation unit for the shared <ATen/ATen.h> precompiled header.
