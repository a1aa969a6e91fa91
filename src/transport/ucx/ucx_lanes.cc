// What UCX offers on this machine, read from its transport layer (UCT): the lanes ucp could pick
// for a peer on this host, on another host, and for device memory.
#include <filesystem>
#include <map>
#include <system_error>
#include <set>
#include <string>
#include <vector>

#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm::transport {
namespace {

struct Lane {
  std::string transport;  // "tcp", "rc_mlx5", "posix"...
  std::string device;     // "eth0", "mlx5_0:1", "memory"...
  uct_device_type_t type;
};

std::vector<Lane> lanes(const UcxApi* ucx) {
  std::vector<Lane> found;
  uct_component_h* components = nullptr;
  unsigned componentCount = 0;
  if (ucx->uct_query_components(&components, &componentCount) != UCS_OK) return found;
  for (unsigned c = 0; c < componentCount; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (ucx->uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> domains(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = domains.data();
    if (ucx->uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& domain : domains) {
      uct_md_config_t* config = nullptr;
      if (ucx->uct_md_config_read(components[c], nullptr, nullptr, &config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      const ucs_status_t opened = ucx->uct_md_open(components[c], domain.md_name, config, &md);
      ucx->uct_config_release(config);
      if (opened != UCS_OK) continue;
      uct_tl_resource_desc_t* resources = nullptr;
      unsigned resourceCount = 0;
      if (ucx->uct_md_query_tl_resources(md, &resources, &resourceCount) == UCS_OK) {
        for (unsigned r = 0; r < resourceCount; ++r) {
          found.push_back(Lane{resources[r].tl_name, resources[r].dev_name, resources[r].dev_type});
        }
        ucx->uct_release_tl_resource_list(resources);
      }
      ucx->uct_md_close(md);
    }
  }
  ucx->uct_release_component_list(components);
  return found;
}

// InfiniBand and RoCE: reliable connected, dynamically connected, unreliable datagram.
bool isRdma(const std::string& transport) {
  return transport.rfind("rc", 0) == 0 || transport.rfind("dc", 0) == 0 ||
         transport.rfind("ud", 0) == 0;
}

}  // namespace

std::string ucxLanes() {
  const UcxApi* ucx = ucxApi();
  if (ucx == nullptr) return "";
  std::map<std::string, std::set<std::string>> byKind;  // kind -> "transport (devices)"
  std::map<std::string, std::set<std::string>> devices;  // "kind/transport" -> devices
  for (const Lane& lane : lanes(ucx)) {
    const char* kind = lane.type == UCT_DEVICE_TYPE_NET   ? "other hosts"
                       : lane.type == UCT_DEVICE_TYPE_SHM ? "same host"
                       : lane.type == UCT_DEVICE_TYPE_ACC ? "device memory"
                                                          : nullptr;
    if (kind == nullptr) continue;  // the loop-back lane to itself
    byKind[kind].insert(lane.transport);
    if (lane.type == UCT_DEVICE_TYPE_NET) devices[lane.transport].insert(lane.device);
  }
  std::string text;
  for (const char* kind : {"same host", "other hosts", "device memory"}) {
    std::string list;
    for (const std::string& transport : byKind[kind]) {
      std::string entry = transport;
      if (devices.count(transport) != 0) {
        std::string names;
        for (const std::string& device : devices[transport]) {
          names += (names.empty() ? "" : ", ") + device;
        }
        entry += " (" + names + ")";
      }
      list += (list.empty() ? "" : ", ") + entry;
    }
    text += std::string(text.empty() ? "" : "; ") + kind + ": " + (list.empty() ? "none" : list);
  }
  return text;
}

bool ucxOffersRdma() {
  // Opening every memory domain costs milliseconds: once per process. A host without an RDMA
  // device (none under /sys/class/infiniband, where RoCE's show too) does not load UCX to ask.
  static const bool offers = [] {
    std::error_code error;
    if (std::filesystem::is_empty("/sys/class/infiniband", error) || error) return false;
    const UcxApi* ucx = ucxApi();
    if (ucx == nullptr) return false;
    for (const Lane& lane : lanes(ucx)) {
      if (lane.type == UCT_DEVICE_TYPE_NET && isRdma(lane.transport)) return true;
    }
    return false;
  }();
  return offers;
}

}  // namespace ringcomm::transport
