// Lists the services a server exposes through gRPC server reflection, one per line, the
// way generic gRPC tools discover them. Usage: reflection_list HOST:PORT
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <iostream>

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
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse reply;
  while (stream->Read(&reply)) {
    for (const auto& s : reply.list_services_response().service()) std::cout << s.name() << "\n";
  }
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    std::cerr << "reflection_list: " << status.error_message() << "\n";
    return 1;
  }
  return 0;
}
