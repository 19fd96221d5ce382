// y = A x for a CSR matrix through the cuSPARSE generic API.
#include <cuda_runtime.h>
#include <cusparse.h>
#include <cstdio>

#define CHECK_CUSPARSE(call)                                                  \
  do {                                                                        \
    cusparseStatus_t s_ = (call);                                             \
    if (s_ != CUSPARSE_STATUS_SUCCESS) {                                      \
      std::printf("cuSPARSE failure %d at line %d\n", (int)s_, __LINE__);     \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main() {
  // 3x3 identity in CSR form.
  const int rows = 3, cols = 3, nnz = 3;
  int h_rowptr[] = {0, 1, 2, 3}, h_colind[] = {0, 1, 2};
  float h_val[] = {1.f, 1.f, 1.f}, h_x[] = {1.f, 2.f, 3.f};
  int *d_rowptr, *d_colind;
  float *d_val, *d_x, *d_y;
  cudaMalloc(&d_rowptr, sizeof(h_rowptr));
  cudaMalloc(&d_colind, sizeof(h_colind));
  cudaMalloc(&d_val, sizeof(h_val));
  cudaMalloc(&d_x, sizeof(h_x));
  cudaMalloc(&d_y, sizeof(h_x));
  cudaMemcpy(d_rowptr, h_rowptr, sizeof(h_rowptr), cudaMemcpyHostToDevice);
  cudaMemcpy(d_colind, h_colind, sizeof(h_colind), cudaMemcpyHostToDevice);
  cudaMemcpy(d_val, h_val, sizeof(h_val), cudaMemcpyHostToDevice);
  cudaMemcpy(d_x, h_x, sizeof(h_x), cudaMemcpyHostToDevice);

  cusparseHandle_t handle;
  CHECK_CUSPARSE(cusparseCreate(&handle));
  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t x, y;
  CHECK_CUSPARSE(cusparseCreateCsr(&A, rows, cols, nnz, d_rowptr, d_colind, d_val, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CHECK_CUSPARSE(cusparseCreateDnVec(&x, cols, d_x, CUDA_R_32F));
  CHECK_CUSPARSE(cusparseCreateDnVec(&y, rows, d_y, CUDA_R_32F));
  const float alpha = 1.f, beta = 0.f;
  size_t bytes = 0;
  CHECK_CUSPARSE(cusparseSpMV_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, x, &beta, y,
                                         CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void* buffer = nullptr;
  cudaMalloc(&buffer, bytes);
  CHECK_CUSPARSE(cusparseSpMV(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, x, &beta, y, CUDA_R_32F,
                              CUSPARSE_SPMV_ALG_DEFAULT, buffer));
  float h_y[3];
  cudaMemcpy(h_y, d_y, sizeof(h_y), cudaMemcpyDeviceToHost);
  std::printf("y = %f %f %f\n", h_y[0], h_y[1], h_y[2]);
  cusparseDestroySpMat(A);
  cusparseDestroyDnVec(x);
  cusparseDestroyDnVec(y);
  cusparseDestroy(handle);
  cudaFree(buffer);
  cudaFree(d_rowptr);
  cudaFree(d_colind);
  cudaFree(d_val);
  cudaFree(d_x);
  cudaFree(d_y);
  return 0;
}
