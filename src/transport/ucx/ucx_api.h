// UCX, loaded when first needed (dlopen), not linked: a process that never talks UCX never maps
// it. An MPI in the same process may bring a UCX of its own (MPICH's wheel bundles a newer one):
// linked, ours would be loaded first and taken for it. The functions ringcomm calls, resolved once.
#pragma once

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <uct/api/uct.h>

#include <string>

namespace ringcomm::transport {

#define RINGCOMM_UCX_FUNCTIONS(X)                                                             \
  X(ucp_config_read) X(ucp_config_modify) X(ucp_config_release) X(ucp_init_version)          \
  X(ucp_cleanup)                                                                              \
  X(ucp_context_query)                                                                        \
  X(ucp_get_version) X(ucp_worker_create) X(ucp_worker_destroy) X(ucp_worker_query)           \
  X(ucp_worker_get_efd) X(ucp_worker_arm) X(ucp_worker_signal) X(ucp_worker_progress)         \
  X(ucp_worker_get_address) X(ucp_worker_release_address) X(ucp_worker_set_am_recv_handler)   \
  X(ucp_ep_create) X(ucp_ep_close_nbx) X(ucp_ep_print_info) X(ucp_am_send_nbx)                \
  X(ucp_am_recv_data_nbx) X(ucp_am_data_release) X(ucp_request_free)                          \
  X(ucp_request_check_status) X(ucp_mem_map) X(ucp_mem_unmap) X(ucs_status_string)            \
  X(uct_query_components) X(uct_release_component_list) X(uct_component_query)               \
  X(uct_md_config_read) X(uct_config_release) X(uct_md_open) X(uct_md_close)                  \
  X(uct_md_query_tl_resources) X(uct_release_tl_resource_list)

struct UcxApi {
#define RINGCOMM_UCX_POINTER(name) decltype(&::name) name = nullptr;
  RINGCOMM_UCX_FUNCTIONS(RINGCOMM_UCX_POINTER)
#undef RINGCOMM_UCX_POINTER
  ucs_global_opts_t* globalOptions = nullptr;  // UCX's log level, among others
};

// The API, loaded on first call (thread-safe); null where no UCX library loads, with why in
// `whyNot` (set once, the same every call).
const UcxApi* ucxApi(std::string* whyNot = nullptr);

}  // namespace ringcomm::transport
