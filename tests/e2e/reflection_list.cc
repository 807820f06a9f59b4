// Lists the services a server exposes through gRPC server reflection, one per line, the
// way generic gRPC tools discover them, and fetches each one's descriptor (exit 1 if
// any is missing). Usage: reflection_list HOST:PORT
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: reflection_list HOST:PORT\n";
    return 2;
  }
  using grpc::reflection::v1alpha::ServerReflection;
  auto stub = ServerReflection::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  stream->Write(request);
  grpc::reflection::v1alpha::ServerReflectionResponse reply;
  std::vector<std::string> services;
  if (stream->Read(&reply)) {
    for (const auto& s : reply.list_services_response().service()) services.push_back(s.name());
  }
  // A tool also needs each service's descriptor to call it: ask for every one.
  int missing = 0;
  for (const std::string& name : services) {
    request.set_file_containing_symbol(name);
    stream->Write(request);
    if (!stream->Read(&reply)) break;
    if (reply.has_error_response()) {
      std::cerr << "reflection_list: no descriptor for " << name << ": "
                << reply.error_response().error_message() << "\n";
      ++missing;
    } else {
      std::cout << name << "\n";
    }
  }
  stream->WritesDone();
  while (stream->Read(&reply)) {
  }
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    std::cerr << "reflection_list: " << status.error_message() << "\n";
    return 1;
  }
  return missing == 0 ? 0 : 1;
}
